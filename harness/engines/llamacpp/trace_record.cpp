// trace-record: which experts each MoE layer of a GGUF model chooses, per decoded token, read from llama.cpp's
// compute graph through its public API only (llama_context_params.cb_eval, ggml_backend_sched_eval_callback),
// the way BigMoeOnEdge's RouterHook (core/src/moe/router_hook.cpp) reads them for its --route-trace.
//
// The scheduler offers every graph node to the callback twice: first with ask = true ("do you want to see this
// node?"), then, for the nodes we said yes to, with ask = false after it has computed them (that node ends a graph
// split, so its data is materialized). We ask only for the routing nodes, named "ffn_moe_topk-<layer>" by
// llama-graph.cpp's build_moe_ffn: an int32 [n_expert_used, n_tokens] VIEW of the router's argsort, whose token
// stride nb[1] is n_expert * 4, not n_expert_used * 4, so it is gathered by strides. Only decode (one-token
// batches) is asked for: prefill's routings are not what a decode reads.
//
// Usage: trace-record MODEL PROMPTS OUT N_PREDICT THREADS N_CTX
//   PROMPTS: the prompts separated by NUL bytes (any text, newlines included).
//   OUT: one line per decoded token and MoE layer, "PROMPT TOKEN LAYER e1 .. eK" (rank order).
// Greedy decoding, up to N_PREDICT tokens per prompt (fewer where the model ends its answer), the KV cache
// cleared between prompts. Exit 2 with one line on stderr for bad input, 1 for a failure inside llama.cpp.

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Recorder {
    bool decoding = false;
    std::vector<std::vector<int32_t>> ids;  // per layer, this token's experts; empty until its topk is seen
};

const char kTopk[] = "ffn_moe_topk-";

int layer_of(const ggml_tensor * t) {
    if (std::strncmp(t->name, kTopk, sizeof(kTopk) - 1) != 0) return -1;
    char * end = nullptr;
    long il = std::strtol(t->name + sizeof(kTopk) - 1, &end, 10);
    return (end && *end == '\0' && il >= 0) ? (int) il : -1;
}

bool on_eval(ggml_tensor * t, bool ask, void * user_data) {
    auto * rec = static_cast<Recorder *>(user_data);
    const int il = layer_of(t);
    if (ask) return rec->decoding && il >= 0;
    if (il < 0 || !rec->decoding || t->type != GGML_TYPE_I32) return true;
    if ((size_t) il >= rec->ids.size()) rec->ids.resize(il + 1);
    const int nu = (int) t->ne[0], nt = (int) t->ne[1];
    std::vector<char> copy;
    const char * data = (const char *) t->data;
    if (t->buffer && !ggml_backend_buffer_is_host(t->buffer)) {  // a device tensor: fetch its bytes first
        copy.resize(ggml_nbytes(t));
        ggml_backend_tensor_get(t, copy.data(), 0, copy.size());
        data = copy.data();
    }
    std::vector<int32_t> & out = rec->ids[il];
    out.assign(nu, -1);
    const size_t last = (size_t) (nt - 1);  // a decode batch has one token; its row is the last
    for (int k = 0; k < nu; ++k) out[k] = *(const int32_t *) (data + last * t->nb[1] + (size_t) k * t->nb[0]);
    return true;
}

void quiet_log(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

std::vector<std::string> read_prompts(const char * path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream all;
    all << in.rdbuf();
    std::vector<std::string> prompts;
    std::string text = all.str(), one;
    std::istringstream parts(text);
    while (std::getline(parts, one, '\0'))
        if (!one.empty()) prompts.push_back(one);
    return prompts;
}

std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text) {
    int n = -llama_tokenize(vocab, text.c_str(), (int32_t) text.size(), nullptr, 0, true, true);
    std::vector<llama_token> tokens(n > 0 ? n : 0);
    if (n > 0) llama_tokenize(vocab, text.c_str(), (int32_t) text.size(), tokens.data(), n, true, true);
    return tokens;
}

// Decode one prompt greedily, writing each decoded token's routing; the number of tokens written, or -1.
int record_prompt(llama_context * ctx, const llama_vocab * vocab, llama_sampler * greedy, Recorder & rec,
                  std::vector<llama_token> prompt, int prompt_no, int n_predict, FILE * out) {
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_sampler_reset(greedy);
    rec.decoding = false;
    if (llama_decode(ctx, llama_batch_get_one(prompt.data(), (int32_t) prompt.size())) != 0) return -1;
    int written = 0;
    for (int i = 0; i < n_predict; ++i) {
        llama_token token = llama_sampler_sample(greedy, ctx, -1);
        if (llama_vocab_is_eog(vocab, token)) break;
        for (auto & layer : rec.ids) layer.clear();
        rec.decoding = true;
        const int rc = llama_decode(ctx, llama_batch_get_one(&token, 1));
        rec.decoding = false;
        if (rc != 0) return -1;
        for (size_t il = 0; il < rec.ids.size(); ++il) {
            if (rec.ids[il].empty()) continue;  // a dense layer (no router) has no routing
            std::fprintf(out, "%d %d %zu", prompt_no, written, il);
            for (int32_t e : rec.ids[il]) std::fprintf(out, " %d", e);
            std::fputc('\n', out);
        }
        ++written;
    }
    return written;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc != 7) {
        std::fprintf(stderr, "usage: %s MODEL PROMPTS OUT N_PREDICT THREADS N_CTX\n", argv[0]);
        return 2;
    }
    const int n_predict = std::atoi(argv[4]), threads = std::atoi(argv[5]), n_ctx = std::atoi(argv[6]);
    const std::vector<std::string> prompts = read_prompts(argv[2]);
    if (prompts.empty() || n_predict <= 0 || threads <= 0 || n_ctx <= 0) {
        std::fprintf(stderr, "trace-record: expected prompts and positive N_PREDICT, THREADS, N_CTX\n");
        return 2;
    }
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(argv[1], mparams);
    if (!model) {
        std::fprintf(stderr, "trace-record: %s: llama.cpp cannot load the model\n", argv[1]);
        return 2;
    }
    Recorder rec;
    rec.ids.resize(llama_model_n_layer(model));
    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = (uint32_t) n_ctx;
    cparams.n_threads = cparams.n_threads_batch = threads;
    cparams.cb_eval = on_eval;
    cparams.cb_eval_user_data = &rec;
    cparams.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cparams);
    FILE * out = std::fopen(argv[3], "w");
    if (!ctx || !out) {
        std::fprintf(stderr, "trace-record: cannot create the context or open %s\n", argv[3]);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    llama_sampler * greedy = llama_sampler_init_greedy();
    int status = 0;
    for (size_t p = 0; p < prompts.size() && status == 0; ++p) {
        std::vector<llama_token> tokens = tokenize(vocab, prompts[p]);
        if (tokens.empty()) {
            std::fprintf(stderr, "trace-record: prompt %zu tokenizes to nothing\n", p + 1);
            status = 2;
        } else if ((int) tokens.size() + n_predict > n_ctx) {
            std::fprintf(stderr, "trace-record: prompt %zu has %zu tokens; with %d to decode that exceeds the "
                         "context of %d (--ctx)\n", p + 1, tokens.size(), n_predict, n_ctx);
            status = 2;
        } else if (record_prompt(ctx, vocab, greedy, rec, tokens, (int) p, n_predict, out) < 0) {
            std::fprintf(stderr, "trace-record: llama_decode failed on prompt %zu\n", p + 1);
            status = 1;
        }
    }
    std::fclose(out);
    llama_sampler_free(greedy);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return status;
}
