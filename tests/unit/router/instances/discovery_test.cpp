// DNS discovery through the resolver seam: a scripted resolver, model servers on loopback
// addresses 127.0.0.1-3 sharing one port (as a headless Service's pods share theirs).
#include <filesystem>
#include <fstream>
#include <set>

#include "router/instances/discovery.hpp"
#include "tests/unit/router/instances/fixture.hpp"

namespace pdr::instances {
namespace {

using test::FakeHttpServer;

// Answers what the test last set; a lookup can be made to fail.
class ScriptedResolver final : public NameResolver {
public:
    struct Script {
        Resolved answer{true, {}, {}};
        std::vector<std::string> asked;
    };
    explicit ScriptedResolver(std::shared_ptr<Script> s) : s_(std::move(s)) {}
    awaitable<Resolved> resolve(std::string name) override {
        s_->asked.push_back(name);
        co_return s_->answer;
    }

private:
    std::shared_ptr<Script> s_;
};

class DiscoveryTest : public RegistryTest {
protected:
    DiscoveryTest() {
        // Three engines on 127.0.0.1..3, one port.
        servers.push_back(std::make_unique<FakeHttpServer>(ioc.get_executor(), serving("m")));
        port = servers[0]->start();
        for (const char* a : {"127.0.0.2", "127.0.0.3"}) {
            servers.push_back(std::make_unique<FakeHttpServer>(ioc.get_executor(), serving("m")));
            servers.back()->start(a, port);
        }
        cfg.decode_dns = config::InstanceAddress{"engines.test", port};
    }
    ~DiscoveryTest() override {
        if (discovery) {
            discovery->stop();
        }
    }
    Discovery& disc() {
        if (!discovery) {
            discovery = std::make_unique<Discovery>(ioc.get_executor(), reg(), cfg,
                                                    std::make_unique<ScriptedResolver>(script));
        }
        return *discovery;
    }
    static awaitable<bool> refreshed(Discovery& d) {
        co_await d.refresh();
        co_return true;
    }
    void refresh() { ASSERT_TRUE(test::run_task(ioc, refreshed(disc()), Duration{5000})); }
    std::string name(const char* a) const { return std::string(a) + ":" + std::to_string(port); }
    std::set<std::string> live(Role role) {
        std::set<std::string> out;
        for (const auto& i : reg().list(role)) {
            out.insert(i->name + " " + i->source);
        }
        return out;
    }

    unsigned short port = 0;
    std::vector<std::unique_ptr<FakeHttpServer>> servers;
    std::shared_ptr<ScriptedResolver::Script> script = std::make_shared<ScriptedResolver::Script>();
    std::unique_ptr<Discovery> discovery;
};

TEST_F(DiscoveryTest, AddsWhatAppearsAndDrainsWhatGoes) {
    const std::string src = "dns:engines.test:" + std::to_string(port);
    reg().add_configured(Role::Decode, config::InstanceAddress{"127.0.0.3", port});  // static
    script->answer.addresses = {"127.0.0.1", "127.0.0.2", "127.0.0.2", "127.0.0.3"};
    refresh();
    EXPECT_EQ(script->asked, std::vector<std::string>{"engines.test"});
    EXPECT_EQ(live(Role::Decode),
              (std::set<std::string>{name("127.0.0.1") + " " + src, name("127.0.0.2") + " " + src,
                                     name("127.0.0.3") + " static"}));
    EXPECT_TRUE(live(Role::Prefill).empty());
    for (const auto& s : servers) {
        s->set_handler(serving("m"));
    }

    // 127.0.0.2 goes away with a request in flight: no new picks, the request finishes.
    InFlight held = reg().acquire(reg().find(Role::Decode, name("127.0.0.2")));
    const InstancePtr leaving = held.instance();
    script->answer.addresses = {"127.0.0.1", "127.0.0.3"};
    refresh();
    EXPECT_TRUE(leaving->removed);
    EXPECT_EQ(live(Role::Decode), (std::set<std::string>{name("127.0.0.1") + " " + src,
                                                         name("127.0.0.3") + " static"}));
    for (int i = 0; i < 6; ++i) {
        EXPECT_NE(reg().pick(Role::Decode), leaving);
    }
    const auto listed = reg().to_json();
    EXPECT_EQ(listed.size(), 3u) << listed.dump();  // the drained one, until its request ends
    held.release();
    EXPECT_EQ(reg().to_json().size(), 2u);

    // A failed lookup changes nothing; a name with no records drains all it gave, never the
    // static instance of the same address list.
    script->answer = Resolved{false, "SERVFAIL", {}};
    refresh();
    EXPECT_EQ(live(Role::Decode).size(), 2u);
    script->answer = Resolved{true, {}, {}};
    refresh();
    EXPECT_EQ(live(Role::Decode), (std::set<std::string>{name("127.0.0.3") + " static"}));

    // It comes back: added again.
    script->answer.addresses = {"127.0.0.2"};
    refresh();
    EXPECT_TRUE(reg().find(Role::Decode, name("127.0.0.2")));
}

TEST_F(DiscoveryTest, AnInstanceThatFailsItsProbeIsTriedAgain) {
    cfg.model = "m";
    servers[1]->set_handler(serving("another-model"));
    servers[2]->stop();
    script->answer.addresses = {"127.0.0.1", "127.0.0.2", "127.0.0.3"};
    refresh();
    EXPECT_EQ(reg().list(Role::Decode).size(), 1u);
    EXPECT_TRUE(reg().find(Role::Decode, name("127.0.0.1")));
    servers[1]->set_handler(serving("m"));
    refresh();
    EXPECT_TRUE(reg().find(Role::Decode, name("127.0.0.2")));
    EXPECT_FALSE(reg().find(Role::Decode, name("127.0.0.3")));
}

TEST_F(DiscoveryTest, TheLoopRefreshesOnItsPeriod) {
    cfg.dns_refresh = Duration{100};
    script->answer.addresses = {"127.0.0.1"};
    disc().start();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return reg().find(Role::Decode, name("127.0.0.1")) != nullptr; },
        Duration{3000}));
    script->answer.addresses = {"127.0.0.2"};
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return reg().find(Role::Decode, name("127.0.0.2")) != nullptr; },
        Duration{3000}));
    EXPECT_FALSE(reg().find(Role::Decode, name("127.0.0.1")));
    EXPECT_GE(script->asked.size(), 2u);
}

TEST(HostsFileResolverTest, ReadsTheFileAtEveryLookup) {
    net::io_context ioc;
    const auto path = std::filesystem::temp_directory_path() /
                      ("pdr-hosts-" + std::to_string(::getpid()) + ".txt");
    auto resolver = make_hosts_file_resolver(path.string());
    auto lookup = [&](std::string n) {
        return test::run_task(ioc, resolver->resolve(std::move(n)), Duration{2000}).value();
    };
    EXPECT_FALSE(lookup("a.test").ok);  // no file yet
    std::ofstream(path) << "# engines\nA.test 127.0.0.1 ::1  # two\nb.test 127.0.0.9\n";
    const Resolved a = lookup("a.test");
    EXPECT_TRUE(a.ok);
    EXPECT_EQ(a.addresses, (std::vector<std::string>{"127.0.0.1", "::1"}));
    EXPECT_TRUE(lookup("c.test").ok);
    EXPECT_TRUE(lookup("c.test").addresses.empty());
    std::ofstream(path) << "a.test 127.0.0.2\n";
    EXPECT_EQ(lookup("a.test").addresses, std::vector<std::string>{"127.0.0.2"});
    std::filesystem::remove(path);
}

TEST(DnsResolverTest, ResolvesLocalhostWithoutTheNetwork) {
    net::io_context ioc;
    auto resolver = make_dns_resolver(ioc.get_executor());
    const auto r = test::run_task(ioc, resolver->resolve("localhost"), Duration{5000});
    ASSERT_TRUE(r.has_value());
    ASSERT_TRUE(r->ok) << r->error;
    EXPECT_FALSE(r->addresses.empty());
}

}  // namespace
}  // namespace pdr::instances
