#include "tests/support/cluster.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "sim/generation.hpp"

namespace pdr::test {

// ---- Cluster ----------------------------------------------------------------------------------

Cluster::~Cluster() {
    // Router first, so it sees no upstream vanish while draining.
    for (auto it = servers_.rbegin(); it != servers_.rend(); ++it) {
        (*it)->proc.stop(Ms{3000});
    }
}

Server& Cluster::start(const std::string& name, const std::string& exe,
                       std::vector<std::string> args, Ms port_timeout) {
    int n = counter_++;
    std::string port_file = dir_.file(name + "-" + std::to_string(n) + ".port");
    std::string log_file = dir_.file(name + "-" + std::to_string(n) + ".log");
    args.push_back("--port-file");
    args.push_back(port_file);
    std::string error;
    auto proc = Process::spawn(exe, args, log_file, error);
    if (!proc) {
        throw std::runtime_error("cannot start " + name + ": " + error);
    }
    auto server = std::make_unique<Server>(Server{name, std::move(*proc), 0, {}, {}});
    server->port = wait_port_file(port_file, server->proc, port_timeout);
    if (server->port == 0) {
        bool alive = server->proc.running();
        auto st = server->proc.stop(Ms{1000});
        throw std::runtime_error(
            name +
            (alive ? " wrote no port file within " + std::to_string(port_timeout.count()) + " ms"
                   : " exited (code " + std::to_string(st.code) + ", signal " +
                         std::to_string(st.signal) + ") before writing its port file") +
            "\n$ " + server->proc.command_line() + "\n" + server->proc.log());
    }
    servers_.push_back(std::move(server));
    return *servers_.back();
}

namespace {

bool lmcache_mode(const std::vector<std::string>& args) {
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--kv-mode=lmcache" ||
            (args[i] == "--kv-mode" && i + 1 < args.size() && args[i + 1] == "lmcache")) {
            return true;
        }
    }
    return false;
}

std::vector<unsigned short> ports_of(const nlohmann::json& j, const char* key) {
    std::vector<unsigned short> out;
    if (j.is_object() && j.contains(key) && j[key].is_array()) {
        for (const auto& p : j[key]) {
            out.push_back(p.get<unsigned short>());
        }
    }
    return out;
}

}  // namespace

Server& Cluster::start_pdsim(const std::string& role, const std::vector<std::string>& extra) {
    std::vector<std::string> args{"--role", role, "--host",  "127.0.0.1",
                                  "--port", "0",  "--model", kModel};
    args.insert(args.end(), extra.begin(), extra.end());
    const bool receivers = role == "decode" && lmcache_mode(args);
    const std::string ports_file = dir_.file("lmcache-ports-" + std::to_string(counter_) + ".json");
    if (receivers) {
        args.push_back("--lmcache-ports-file");
        args.push_back(ports_file);
    }
    Server& s = start("pdsim-" + role, pdsim_path(), args);
    if (receivers) {
        // pdsim writes this file before its port file.
        const auto j = nlohmann::json::parse(read_file(ports_file), nullptr, false);
        s.lmcache_init_ports = ports_of(j, "init_ports");
        s.lmcache_alloc_ports = ports_of(j, "alloc_ports");
        if (s.lmcache_init_ports.empty() ||
            s.lmcache_init_ports.size() != s.lmcache_alloc_ports.size()) {
            throw std::runtime_error("pdsim decode wrote no usable " + ports_file + ": " +
                                     read_file(ports_file));
        }
    }
    return s;
}

Server& Cluster::start_router(const std::vector<std::string>& prefills,
                              const std::vector<std::string>& decodes,
                              const std::vector<std::string>& extra) {
    std::vector<std::string> args{"--host", "127.0.0.1", "--port", "0"};
    for (const auto& p : prefills) {
        args.push_back("--prefill");
        args.push_back(p);
    }
    for (const auto& d : decodes) {
        args.push_back("--decode");
        args.push_back(d);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    return start("pdrouter", pdrouter_path(), args);
}

std::string Cluster::logs() const {
    std::ostringstream out;
    for (const auto& s : servers_) {
        out << "==== " << s->name << " (port " << s->port << ")\n$ " << s->proc.command_line()
            << "\n"
            << s->proc.log() << "\n";
    }
    return out.str();
}

PdCluster start_pd(const PdOptions& o) {
    PdCluster pd;
    std::vector<std::string> ps, ds;
    std::vector<std::string> p_args = o.sim_args;
    p_args.insert(p_args.end(), o.prefill_args.begin(), o.prefill_args.end());
    std::vector<std::string> d_args = o.sim_args;
    d_args.insert(d_args.end(), o.decode_args.begin(), o.decode_args.end());
    for (int i = 0; i < o.prefills; ++i) {
        pd.prefill.push_back(&pd.cluster->start_pdsim("prefill", p_args));
        ps.push_back(pd.prefill.back()->address());
    }
    for (int i = 0; i < o.decodes; ++i) {
        pd.decode.push_back(&pd.cluster->start_pdsim("decode", d_args));
        ds.push_back(pd.decode.back()->address());
    }
    pd.router = &pd.cluster->start_router(ps, ds, o.router_args);
    return pd;
}

// ---- DeadPort ---------------------------------------------------------------------------------

DeadPort::DeadPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        throw std::runtime_error("DeadPort: bind failed");
    }
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
}

DeadPort::~DeadPort() {
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

// ---- pdsim debug API --------------------------------------------------------------------------

namespace {
nlohmann::json get_json(const Server& s, const std::string& target) {
    auto r = http_get(s.port, target, {}, Ms{5000});
    if (r.status != 200) {
        throw std::runtime_error("GET " + target + " on " + s.name + ": " + r.describe());
    }
    auto j = r.json();
    if (j.is_discarded()) {
        throw std::runtime_error("GET " + target + " on " + s.name + ": not JSON: " + r.body);
    }
    return j;
}
}  // namespace

nlohmann::json sim_state(const Server& s) {
    return get_json(s, "/debug/state");
}

nlohmann::json sim_requests(const Server& s) {
    auto j = get_json(s, "/debug/requests");
    if (j.is_object() && j.contains("requests")) {
        return j["requests"];
    }
    return j;
}

void sim_fault(const Server& s, const nlohmann::json& fault) {
    auto r = http_post_json(s.port, "/debug/faults", fault, {}, Ms{5000});
    if (r.status != 200) {
        throw std::runtime_error("POST /debug/faults on " + s.name + ": " + r.describe());
    }
}

void sim_reset(const Server& s) {
    auto r = http_post(s.port, "/debug/reset", "{}", {}, Ms{5000});
    if (r.status != 200) {
        throw std::runtime_error("POST /debug/reset on " + s.name + ": " + r.describe());
    }
}

long long counter(const nlohmann::json& state, const std::string& name) {
    const nlohmann::json* obj = &state;
    if (state.contains("counters") && state["counters"].is_object() &&
        state["counters"].contains(name)) {
        obj = &state["counters"];
    }
    if (!obj->contains(name) || !(*obj)[name].is_number()) {
        return -1;
    }
    return (*obj)[name].get<long long>();
}

std::string recorded_header(const nlohmann::json& entry, const std::string& name) {
    if (!entry.contains("headers")) {
        return {};
    }
    const auto& h = entry["headers"];
    if (h.is_object()) {
        if (h.contains(name)) {
            const auto& v = h[name];
            if (v.is_string()) {
                return v.get<std::string>();
            }
            if (v.is_array() && !v.empty() && v[0].is_string()) {
                return v[0].get<std::string>();
            }
        }
        return {};
    }
    if (h.is_array()) {
        for (const auto& pair : h) {
            if (pair.is_array() && pair.size() == 2 && pair[0] == name && pair[1].is_string()) {
                return pair[1].get<std::string>();
            }
        }
    }
    return {};
}

std::vector<nlohmann::json> requests_with_id(const Server& s, const std::string& id) {
    std::vector<nlohmann::json> out;
    for (const auto& e : sim_requests(s)) {
        if (recorded_header(e, "x-request-id") == id) {
            out.push_back(e);
        }
    }
    return out;
}

// ---- metrics ----------------------------------------------------------------------------------

std::string metrics_text(const Server& router) {
    auto r = http_get(router.port, "/metrics", {}, Ms{5000});
    if (r.status != 200) {
        throw std::runtime_error("GET /metrics: " + r.describe());
    }
    return r.body;
}

std::optional<double> metric(const std::string& text, const std::string& name,
                             const std::map<std::string, std::string>& labels) {
    static const std::regex label_re(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)")re");
    std::optional<double> sum;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#' || line.rfind(name, 0) != 0) {
            continue;
        }
        std::size_t p = name.size();
        if (p < line.size() && line[p] != '{' && line[p] != ' ') {
            continue;  // a longer name with the same prefix
        }
        std::map<std::string, std::string> have;
        if (p < line.size() && line[p] == '{') {
            auto close = line.find('}', p);
            if (close == std::string::npos) {
                continue;
            }
            std::string ls = line.substr(p + 1, close - p - 1);
            for (std::sregex_iterator it(ls.begin(), ls.end(), label_re), end; it != end; ++it) {
                have[(*it)[1]] = (*it)[2];
            }
            p = close + 1;
        }
        bool match = true;
        for (const auto& [k, v] : labels) {
            auto f = have.find(k);
            if (f == have.end() || f->second != v) {
                match = false;
                break;
            }
        }
        if (!match) {
            continue;
        }
        std::istringstream vs(line.substr(p));
        std::string value;
        vs >> value;
        try {
            sum = sum.value_or(0.0) + std::stod(value);
        } catch (...) {
        }
    }
    return sum;
}

// ---- requests ---------------------------------------------------------------------------------

nlohmann::json completion_body(const std::string& prompt, int max_tokens, bool stream) {
    return {{"model", kModel}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", stream}};
}

nlohmann::json chat_body(const std::string& content, int max_tokens, bool stream) {
    return {{"model", kModel},
            {"messages", nlohmann::json::array({{{"role", "user"}, {"content", content}}})},
            {"max_tokens", max_tokens},
            {"stream", stream}};
}

std::string route_of(const nlohmann::json& body) {
    return body.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
}

std::vector<std::int64_t> prompt_token_ids(const nlohmann::json& body) {
    std::string prompt;
    if (body.contains("messages")) {
        std::string error;
        sim::chat_prompt(body["messages"], prompt, error);
    } else if (body.contains("prompt") && body["prompt"].is_array()) {
        return body["prompt"].get<std::vector<std::int64_t>>();  // already token ids
    } else {
        prompt = body.value("prompt", "");
    }
    return sim::tokenize(prompt);
}

std::string expected_text(const nlohmann::json& body) {
    // Same rule as pdsim: chat's max_completion_tokens wins over max_tokens.
    int max_tokens = sim::kDefaultMaxTokens;
    if (body.contains("max_tokens") && body["max_tokens"].is_number_integer()) {
        max_tokens = body["max_tokens"].get<int>();
    }
    if (body.contains("messages") && body.contains("max_completion_tokens") &&
        body["max_completion_tokens"].is_number_integer()) {
        max_tokens = body["max_completion_tokens"].get<int>();
    }
    return sim::generate_text(prompt_token_ids(body), max_tokens);
}

std::string expected_completion_text(const std::string& prompt, int max_tokens) {
    return sim::generate_text(prompt, max_tokens);
}

std::string expected_chat_text(const nlohmann::json& messages, int max_tokens) {
    std::string prompt;
    std::string error;
    sim::chat_prompt(messages, prompt, error);
    return sim::generate_text(prompt, max_tokens);
}

std::int64_t expected_first_token(const std::vector<std::int64_t>& ids) {
    return sim::generate_ids(ids, 1).front();
}

std::string token_id_text(std::int64_t id) {
    return sim::id_text(id);
}

bool wait_until(const std::function<bool()>& pred, Ms timeout, Ms poll) {
    auto deadline = Clock::now() + timeout;
    while (true) {
        if (pred()) {
            return true;
        }
        if (Clock::now() >= deadline) {
            return pred();
        }
        std::this_thread::sleep_for(poll);
    }
}

bool is_uuid_v4(const std::string& s) {
    static const std::regex re(
        "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
    return std::regex_match(s, re);
}

bool is_openai_error(const std::string& body, std::string* message) {
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) {
        return false;
    }
    const auto& e = j["error"];
    if (!e.contains("message") || !e["message"].is_string() || !e.contains("type") ||
        !e["type"].is_string()) {
        return false;
    }
    if (message) {
        *message = e["message"].get<std::string>();
    }
    return true;
}

}  // namespace pdr::test
