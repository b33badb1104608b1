#include "net/common/log.hpp"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace pdr::log {
namespace {

// Captures what is written to fd 2 while `fn` runs.
template <class F>
std::string capture_stderr(F&& fn) {
    std::FILE* tmp = std::tmpfile();
    EXPECT_NE(tmp, nullptr);
    int saved = ::dup(STDERR_FILENO);
    ::dup2(::fileno(tmp), STDERR_FILENO);
    fn();
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    std::fflush(tmp);
    std::rewind(tmp);
    std::string out;
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, tmp)) > 0) {
        out.append(buf, n);
    }
    std::fclose(tmp);
    return out;
}

class LogTest : public ::testing::Test {
protected:
    void TearDown() override { configure(Level::Info, Format::Text); }
};

TEST_F(LogTest, WriteFiltersByLevelWithoutTheMacros) {
    configure(Level::Error, Format::Text);
    std::string out = capture_stderr([] {
        write(Level::Warn, "flow", "a warning below --log-level error");
        write(Level::Info, "flow", "an info line");
        write(Level::Error, "flow", "an error");
    });
    EXPECT_EQ(out.find("warning below"), std::string::npos) << out;
    EXPECT_EQ(out.find("info line"), std::string::npos) << out;
    EXPECT_NE(out.find("an error"), std::string::npos) << out;
    configure(Level::Off, Format::Text);
    EXPECT_TRUE(capture_stderr([] { write(Level::Error, "flow", "x"); }).empty());
}

TEST_F(LogTest, TextFormat) {
    configure(Level::Info, Format::Text);
    std::string out = capture_stderr([] {
        PDR_INFO("server", "listening on 1", "req-1");
        PDR_ERROR("upstream", std::string("bad\nthing\0\x1b[2J\x7f!", 16));
        PDR_DEBUG("server", "hidden");
    });
    std::istringstream in(out);
    std::string l1, l2, l3;
    std::getline(in, l1);
    std::getline(in, l2);
    EXPECT_FALSE(std::getline(in, l3)) << "debug line should be filtered: " << l3;
    std::regex text(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO |ERROR) \[(\w+)\] .*$)");
    EXPECT_TRUE(std::regex_match(l1, text)) << l1;
    EXPECT_TRUE(std::regex_match(l2, text)) << l2;
    EXPECT_NE(l1.find("INFO  [server] listening on 1 request_id=req-1"), std::string::npos) << l1;
    EXPECT_NE(l2.find("ERROR [upstream] bad thing??[2J?!"), std::string::npos) << l2;
    EXPECT_EQ(l2.find("request_id"), std::string::npos);
}

TEST_F(LogTest, JsonFormat) {
    configure(Level::Debug, Format::Json);
    std::string out = capture_stderr([] {
        PDR_DEBUG("kv", "quote \" and \\", "r2");
        PDR_WARN("kv", "no id");
    });
    std::istringstream in(out);
    std::string line;
    std::vector<nlohmann::json> objs;
    while (std::getline(in, line)) {
        objs.push_back(nlohmann::json::parse(line));
    }
    ASSERT_EQ(objs.size(), 2u);
    EXPECT_EQ(objs[0]["level"], "debug");
    EXPECT_EQ(objs[0]["component"], "kv");
    EXPECT_EQ(objs[0]["msg"], "quote \" and \\");
    EXPECT_EQ(objs[0]["request_id"], "r2");
    EXPECT_TRUE(objs[0]["ts"].is_string());
    EXPECT_EQ(objs[1]["level"], "warn");
    EXPECT_FALSE(objs[1].contains("request_id"));
}

TEST_F(LogTest, LinesStayWholeAcrossThreads) {
    configure(Level::Info, Format::Text);
    std::string out = capture_stderr([] {
        std::vector<std::thread> ts;
        for (int t = 0; t < 4; ++t) {
            ts.emplace_back([t] {
                for (int i = 0; i < 200; ++i) {
                    PDR_INFO("t" + std::to_string(t), std::string(100, 'a' + t));
                }
            });
        }
        for (auto& th : ts) {
            th.join();
        }
    });
    std::istringstream in(out);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
        ++n;
        auto pos = line.find("] ");
        ASSERT_NE(pos, std::string::npos) << line;
        std::string msg = line.substr(pos + 2);
        ASSERT_EQ(msg.size(), 100u) << line;
        EXPECT_EQ(msg, std::string(100, msg[0]));
    }
    EXPECT_EQ(n, 800);
}

TEST_F(LogTest, ParseLevel) {
    Level l = Level::Off;
    EXPECT_TRUE(parse_level("DEBUG", l));
    EXPECT_EQ(l, Level::Debug);
    EXPECT_TRUE(parse_level("warning", l));
    EXPECT_EQ(l, Level::Warn);
    EXPECT_TRUE(parse_level("error", l));
    EXPECT_EQ(l, Level::Error);
    EXPECT_TRUE(parse_level("off", l));
    EXPECT_EQ(l, Level::Off);
    EXPECT_FALSE(parse_level("loud", l));
    EXPECT_EQ(l, Level::Off);
}

}  // namespace
}  // namespace pdr::log
