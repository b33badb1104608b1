#pragma once
// Real pdsim and pdrouter processes on 127.0.0.1 port 0 for integration tests, plus helpers for
// pdsim's debug API, pdrouter's /metrics and the expected deterministic answer text.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/http.hpp"
#include "tests/support/process.hpp"

namespace pdr::test {

inline constexpr const char* kModel = "pdsim-test-model";

struct Server {
    std::string name;  // e.g. "pdsim-prefill-0", "pdrouter"
    Process proc;
    unsigned short port = 0;
    // A decode pdsim started with --kv-mode lmcache: its KV receivers' bound ports, one per TP
    // rank (what the router puts in disagg_spec.receiver_init_port / receiver_alloc_port).
    std::vector<unsigned short> lmcache_init_ports;
    std::vector<unsigned short> lmcache_alloc_ports;
    std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

// Owns a temp dir and the processes started in it; stops them all on destruction.
// Start failures throw std::runtime_error with the process log in the message.
class Cluster {
public:
    Cluster() = default;
    ~Cluster();
    Cluster(const Cluster&) = delete;
    Cluster& operator=(const Cluster&) = delete;

    // pdsim --role <role> --host 127.0.0.1 --port 0 --port-file F --model kModel <extra...>
    // A decode whose `extra` holds "--kv-mode lmcache" also gets --lmcache-ports-file, and the
    // returned Server carries its receiver ports (ports 0 by default: --tp-size free ones, or
    // pass --lmcache-init-ports / --lmcache-alloc-ports).
    Server& start_pdsim(const std::string& role, const std::vector<std::string>& extra = {});
    // pdrouter --host 127.0.0.1 --port 0 --port-file F --prefill A ... --decode B ... <extra...>
    Server& start_router(const std::vector<std::string>& prefills,
                         const std::vector<std::string>& decodes,
                         const std::vector<std::string>& extra = {});
    // Any executable that understands --port-file (appended with a fresh path).
    Server& start(const std::string& name, const std::string& exe, std::vector<std::string> args,
                  Ms port_timeout = Ms{10000});

    // Every process's command line and log, for failure messages.
    std::string logs() const;
    const TempDir& dir() const noexcept { return dir_; }
    std::vector<std::unique_ptr<Server>>& servers() noexcept { return servers_; }

private:
    TempDir dir_;
    std::vector<std::unique_ptr<Server>> servers_;
    int counter_ = 0;
};

// 1..N prefill and 1..N decode pdsims behind one pdrouter.
struct PdCluster {
    std::unique_ptr<Cluster> cluster = std::make_unique<Cluster>();
    std::vector<Server*> prefill, decode;
    Server* router = nullptr;
};
struct PdOptions {
    int prefills = 1;
    int decodes = 1;
    std::vector<std::string> sim_args;      // both roles
    std::vector<std::string> prefill_args;  // prefills only (after sim_args)
    std::vector<std::string> decode_args;   // decodes only (after sim_args)
    std::vector<std::string> router_args;   // appended to the router's command line

    // Fluent setters: start(PdOptions{}.p(2).d(2).router({"--flag", "v"})).
    PdOptions& p(int n) {
        prefills = n;
        return *this;
    }
    PdOptions& d(int n) {
        decodes = n;
        return *this;
    }
    PdOptions& sim(std::vector<std::string> a) {
        sim_args = std::move(a);
        return *this;
    }
    PdOptions& router(std::vector<std::string> a) {
        router_args = std::move(a);
        return *this;
    }
    PdOptions& prefill_sim(std::vector<std::string> a) {
        prefill_args = std::move(a);
        return *this;
    }
    PdOptions& decode_sim(std::vector<std::string> a) {
        decode_args = std::move(a);
        return *this;
    }
};
PdCluster start_pd(const PdOptions& o);

// A loopback TCP port that is bound but not listening: connecting to it is refused.
class DeadPort {
public:
    DeadPort();
    ~DeadPort();
    DeadPort(const DeadPort&) = delete;
    DeadPort& operator=(const DeadPort&) = delete;
    unsigned short port() const noexcept { return port_; }
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

private:
    int fd_ = -1;
    unsigned short port_ = 0;
};

// ---- pdsim debug API (throw std::runtime_error on transport/status failure) -------------------
nlohmann::json sim_state(const Server& s);
nlohmann::json sim_requests(const Server& s);  // the list of recorded requests (oldest first)
void sim_fault(const Server& s, const nlohmann::json& fault);
void sim_reset(const Server& s);
long long counter(const nlohmann::json& state, const std::string& name);  // -1 if absent
// A header of a recorded request ("" when absent); handles an object or a list of pairs.
std::string recorded_header(const nlohmann::json& entry, const std::string& name);
// The recorded requests whose X-Request-Id equals `id`.
std::vector<nlohmann::json> requests_with_id(const Server& s, const std::string& id);

// ---- pdrouter /metrics ------------------------------------------------------------------------
std::string metrics_text(const Server& router);
// Sum of the samples of `name` whose labels include all of `labels`; nullopt when none matched.
std::optional<double> metric(const std::string& text, const std::string& name,
                             const std::map<std::string, std::string>& labels = {});

// ---- requests and expected answers ------------------------------------------------------------
nlohmann::json completion_body(const std::string& prompt, int max_tokens, bool stream);
nlohmann::json chat_body(const std::string& content, int max_tokens, bool stream);
// pdsim's deterministic text for a completion/chat body (sim::generate_text): what a single
// engine answers, and what a P/D pair must answer too (in LMCache mode: P's first token plus D's
// continuation from the prompt ids + [first_tok]).
std::string expected_text(const nlohmann::json& body);
std::string expected_completion_text(const std::string& prompt, int max_tokens);
std::string expected_chat_text(const nlohmann::json& messages, int max_tokens);
// The ids pdsim's POST /tokenize answers for a completion body's prompt (string) or a chat
// body's messages.
std::vector<std::int64_t> prompt_token_ids(const nlohmann::json& body);
// The first token id a prefill answers for `ids` (kv_transfer_params.first_tok), and the text of
// any generated token id.
std::int64_t expected_first_token(const std::vector<std::int64_t>& ids);
std::string token_id_text(std::int64_t id);
std::string route_of(const nlohmann::json& body);  // "/v1/chat/completions" or "/v1/completions"

// Polls `pred` every `poll` until true or `timeout`; returns the final value.
bool wait_until(const std::function<bool()>& pred, Ms timeout, Ms poll = Ms{15});

bool is_uuid_v4(const std::string& s);
// {"error": {"message": string, "type": string, ...}}
bool is_openai_error(const std::string& body, std::string* message = nullptr);

}  // namespace pdr::test
