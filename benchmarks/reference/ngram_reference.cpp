// ngram_reference: print the drafts llama.cpp (0c1e570) itself makes for its n-gram speculative types.
//
// Drives the public API of common/speculative.h (common_speculative_init / _begin / _draft / _accept) with one
// implementation enabled, the way examples/speculative-simple does; the n-gram types need no llama_context.
//
// stdin: one JSON object per line (blank lines and lines starting with '#' are skipped):
//   {"id": <anything, echoed>,
//    "type": "ngram-simple" | "ngram-map-k" | "ngram-map-k4v" | "ngram-mod" | "ngram-cache",
//    "params": {...},            // simple/map-k/map-k4v: size_n, size_m, min_hits; ngram-mod: n_match, n_min,
//                                // n_max; ngram-cache: n_draft (must be 8: llama.cpp hard-codes it), static,
//                                // dynamic (lookup cache file paths, "" = none). Missing keys: common.h defaults.
//    "n_max": 16,                // global draft limit (common_speculative_draft_params.n_max), > 0
//    "prompt": [tokens],         // at least 1 token
//    "truth": [tokens],          // the true continuation that follows the prompt
//    "begin": "drop-last"}       // optional: what begin() gets. "drop-last" (default): prompt minus its last
//                                // token, i.e. the tokens in the target context when drafting starts, as in
//                                // speculative-simple and the server; "full": the whole prompt.
// stdout: one JSON object per input line, in order:
//   {"id": ..., "type": ..., "drafts": [[tokens], ...], "hist_len": [n, ...], "n_accepted": [n, ...]}
// or {"id": ..., "error": "..."} for a line that could not be run.
//
// Protocol, per line (a fresh common_speculative each line):
//   begin(prompt[:-1])  (or the full prompt, see "begin")
//   g = 0; history = prompt
//   while g < len(truth):
//     n = min(n_max, len(truth) - g - 1)       // the server's rule: leave room for the target's own token
//     if n <= 0: commit truth[g]; g += 1; continue        // no draft call, no step recorded
//     dparams = {drafting=true, n_max=n, pos0=len(history)-1, id_last=history[-1], prompt=&history[:-1]}
//     common_speculative_draft()                // the wrapper truncates the draft to n_max
//     a = common prefix length of draft and truth[g:]
//     if draft: common_speculative_accept(a)    // as the server does (speculative-simple also calls accept(0)
//                                               // after an empty draft: a no-op for the five n-gram types)
//     record (draft, len(history), a); commit truth[g : g+a+1]; g += a + 1
#include "common.h"
#include "log.h"
#include "speculative.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

using json = nlohmann::ordered_json;

static llama_tokens to_tokens(const json & j, const char * what) {
    if (!j.is_array()) {
        throw std::runtime_error(std::string("'") + what + "' must be an array of token ids");
    }
    llama_tokens out;
    out.reserve(j.size());
    for (const auto & v : j) {
        if (!v.is_number_integer()) {
            throw std::runtime_error(std::string("'") + what + "' must hold integers only");
        }
        out.push_back((llama_token) v.get<int64_t>());
    }
    return out;
}

template <typename T>
static void get_param(const json & p, const char * key, T & dst, long lo, long hi) {
    if (!p.contains(key)) {
        return;
    }
    const long v = p.at(key).get<long>();
    if (v < lo || v > hi) {
        throw std::runtime_error(std::string("param '") + key + "' out of range [" + std::to_string(lo) + ", "
                                 + std::to_string(hi) + "]: " + std::to_string(v));
    }
    dst = (T) v;
}

static json run_case(const json & c) {
    const std::string type_name = c.at("type").get<std::string>();
    const auto type = common_speculative_type_from_name(type_name);
    switch (type) {
        case COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MOD:
        case COMMON_SPECULATIVE_TYPE_NGRAM_CACHE:
            break;
        default:
            throw std::runtime_error("unsupported type '" + type_name + "' (expected ngram-simple, ngram-map-k, "
                                     "ngram-map-k4v, ngram-mod or ngram-cache)");
    }
    const json p = c.value("params", json::object());

    common_params_speculative params;   // defaults from common.h
    params.types = { type };
    switch (type) {
        case COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V: {
            auto & m = type == COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE ? params.ngram_simple
                     : type == COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K  ? params.ngram_map_k
                     :                                                params.ngram_map_k4v;
            get_param(p, "size_n",   m.size_n,   1, 1024);
            get_param(p, "size_m",   m.size_m,   1, 1024);
            get_param(p, "min_hits", m.min_hits, 0, 65535);
            break;
        }
        case COMMON_SPECULATIVE_TYPE_NGRAM_MOD:
            get_param(p, "n_match", params.ngram_mod.n_match, 1, 1024);
            get_param(p, "n_min",   params.ngram_mod.n_min,   0, 1024);
            get_param(p, "n_max",   params.ngram_mod.n_max,   0, 1024);
            break;
        case COMMON_SPECULATIVE_TYPE_NGRAM_CACHE: {
            int n_draft = 8;
            get_param(p, "n_draft", n_draft, 1, 1024);
            if (n_draft != 8) {
                throw std::runtime_error("ngram-cache: llama.cpp hard-codes n_draft = 8 (create_state_ngram_cache)");
            }
            params.ngram_cache.lookup_cache_static  = p.value("static",  std::string());
            params.ngram_cache.lookup_cache_dynamic = p.value("dynamic", std::string());
            for (const auto & path : { params.ngram_cache.lookup_cache_static, params.ngram_cache.lookup_cache_dynamic }) {
                if (!path.empty() && !std::ifstream(path).good()) {
                    throw std::runtime_error("ngram-cache: cannot read lookup cache '" + path + "'");
                }
            }
            break;
        }
        default:
            break;
    }

    const int n_max = c.at("n_max").get<int>();
    if (n_max <= 0) {
        throw std::runtime_error("'n_max' must be > 0");
    }
    const llama_tokens prompt = to_tokens(c.at("prompt"), "prompt");
    const llama_tokens truth  = to_tokens(c.at("truth"),  "truth");
    if (prompt.empty()) {
        throw std::runtime_error("'prompt' needs at least one token");
    }
    const std::string begin_mode = c.value("begin", std::string("drop-last"));
    if (begin_mode != "drop-last" && begin_mode != "full") {
        throw std::runtime_error("'begin' must be \"drop-last\" or \"full\"");
    }

    common_speculative_ptr spec(common_speculative_init(params, 1));
    if (!spec) {
        throw std::runtime_error("common_speculative_init returned null");
    }
    const llama_seq_id seq_id = 0;

    llama_tokens history = prompt;
    if (begin_mode == "full") {
        common_speculative_begin(spec.get(), seq_id, history);
    } else {
        const llama_tokens ctx_tokens(history.begin(), history.end() - 1);
        common_speculative_begin(spec.get(), seq_id, ctx_tokens);
    }

    json drafts   = json::array();
    json hist_len = json::array();
    json n_acc    = json::array();

    llama_tokens ctx_tokens;   // history without its last token: what the target context holds
    llama_tokens draft;

    size_t g = 0;
    while (g < truth.size()) {
        const int n_max_step = std::min<long>(n_max, (long) truth.size() - (long) g - 1);
        if (n_max_step <= 0) {
            history.push_back(truth[g]);
            g += 1;
            continue;
        }

        ctx_tokens.assign(history.begin(), history.end() - 1);
        draft.clear();

        common_speculative_get_draft_params(spec.get(), seq_id) = {
            /* .drafting = */ true,
            /* .n_max    = */ n_max_step,
            /* .pos0     = */ (llama_pos) ctx_tokens.size(),
            /* .id_last  = */ history.back(),
            /* .prompt   = */ &ctx_tokens,
            /* .result   = */ &draft,
        };
        common_speculative_draft(spec.get());

        size_t a = 0;
        while (a < draft.size() && g + a < truth.size() && draft[a] == truth[g + a]) {
            ++a;
        }
        if (!draft.empty()) {
            common_speculative_accept(spec.get(), seq_id, (uint16_t) a);
        }

        drafts.push_back(draft);
        hist_len.push_back(history.size());
        n_acc.push_back(a);

        for (size_t k = 0; k < a + 1 && g < truth.size(); ++k) {
            history.push_back(truth[g++]);
        }
    }

    json out = json::object();
    out["id"]         = c.value("id", json());
    out["type"]       = type_name;
    out["drafts"]     = std::move(drafts);
    out["hist_len"]   = std::move(hist_len);
    out["n_accepted"] = std::move(n_acc);
    return out;
}

int main(int argc, char ** argv) {
    bool verbose = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-v" || a == "--verbose") {
            verbose = true;
        } else {
            fprintf(stderr, "usage: %s [-v]  < cases.jsonl > drafts.jsonl\n", argv[0]);
            return 2;
        }
    }
    // llama.cpp's log goes to stderr; keep it to warnings unless asked (-v: debug, e.g. ngram-map's traces)
    common_log_set_verbosity_thold(verbose ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARN);

    std::ios::sync_with_stdio(false);
    std::string line;
    while (std::getline(std::cin, line)) {
        const auto first = line.find_first_not_of(" \t\r");
        if (first == std::string::npos || line[first] == '#') {
            continue;
        }
        json out;
        json id;
        try {
            const json c = json::parse(line);
            id = c.value("id", json());
            out = run_case(c);
        } catch (const std::exception & e) {
            out = json::object();
            out["id"] = id;
            out["error"] = e.what();
        }
        std::cout << out.dump() << "\n";
        std::cout.flush();
    }
    return 0;
}
