/* The loops of a step over what a target pass reads and writes, compiled into the binding.
 *
 * From Python each was a handful of calls into numpy, and on a CPU a real model's pass evicts numpy's code and
 * data from the caches: measured on a 2-core Zen 4 EPYC with SmolLM2-135M, a single np.argmax over a row of
 * 49152 logits took about 65 us after a pass against 6 us warm, this loop about 20. See docs/design.md. */

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "llama.h"

int32_t specframe_batch_put(struct llama_batch * batch, int32_t at, const llama_token * tokens, int32_t n,
                            llama_pos pos, llama_seq_id seq, int32_t n_logits, int32_t n_vocab)
{
    /* Lay one sequence's tokens into the batch from index `at`, at positions pos..., logits wanted for the last
     * n_logits; return the batch's new length, or -1 (and write nothing) when a token id is outside the vocabulary.
     * Each token's sequence-id array has room for one. */
    for (int32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            return -1;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        batch->token[at + i] = tokens[i];
        batch->pos[at + i] = pos + i;
        batch->n_seq_id[at + i] = 1;
        batch->seq_id[at + i][0] = seq;
        batch->logits[at + i] = i >= n - n_logits;
    }
    batch->n_tokens = at + n;
    return at + n;
}

/* Four floats as one value: SSE on x86-64, NEON on ARM, written once for both (GCC's and Clang's vector
 * extensions). */
typedef float float4 __attribute__((vector_size(16)));
typedef int32_t int4 __attribute__((vector_size(16)));
#define WIDTH 4
#define BLOCK (4 * WIDTH)

static inline float4 larger(float4 a, float4 b)
{
    int4 a_larger = a > b;
    return (float4) ((a_larger & (int4) a) | (~a_larger & (int4) b));
}

static int32_t argmax_row(const float * x, int32_t n)
{
    /* The first largest value's index, as numpy.argmax gives it (for rows without NaN): each block's largest found
     * four lanes at a time, a block searched only when its largest beats the best so far. */
    float best = x[0];
    int32_t at = 0;
    int32_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        float4 a, b, c, d;
        memcpy(&a, x + i, sizeof a);
        memcpy(&b, x + i + WIDTH, sizeof b);
        memcpy(&c, x + i + 2 * WIDTH, sizeof c);
        memcpy(&d, x + i + 3 * WIDTH, sizeof d);
        float4 lanes = larger(larger(a, b), larger(c, d));
        float top = lanes[0];
        for (int l = 1; l < WIDTH; l++) {
            top = lanes[l] > top ? lanes[l] : top;
        }
        if (top > best) {
            for (int j = 0; j < BLOCK; j++) {
                if (x[i + j] == top) {
                    at = i + j;
                    break;
                }
            }
            best = top;
        }
    }
    for (; i < n; i++) {
        if (x[i] > best) {
            best = x[i];
            at = i;
        }
    }
    return at;
}

static float largest(const float * x, int32_t n)
{
    /* The largest of n values (-infinity for none), four lanes at a time. */
    float4 lanes = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    int32_t i = 0;
    for (; i + WIDTH <= n; i += WIDTH) {
        float4 v;
        memcpy(&v, x + i, sizeof v);
        lanes = larger(v, lanes);
    }
    float top = lanes[0];
    for (int l = 1; l < WIDTH; l++) {
        top = lanes[l] > top ? lanes[l] : top;
    }
    for (; i < n; i++) {
        top = x[i] > top ? x[i] : top;
    }
    return top;
}

void specframe_top2_margins(const float * rows, int32_t n_rows, int32_t width, float * out)
{
    /* Each row's largest value less its second largest (0 where the largest appears twice): how near its greedy
     * choice was to a tie. */
    for (int32_t r = 0; r < n_rows; r++) {
        const float * x = rows + (int64_t) r * width;
        int32_t at = argmax_row(x, width);
        float before = largest(x, at), after = largest(x + at + 1, width - at - 1);
        out[r] = x[at] - (before > after ? before : after);
    }
}

int32_t specframe_greedy_choices(const float * rows, int32_t n_rows, int32_t width, const llama_token * next,
                                 int32_t * out)
{
    /* The rows' greedy choices (each row's first largest value) in order, up to the first that differs from the
     * token fed after its row, next[r] (every row where next is NULL: input embeddings): greedy verification
     * keeps nothing after it, so the rows past it are not scanned. Returns how many choices were written. */
    for (int32_t r = 0; r < n_rows; r++) {
        out[r] = argmax_row(rows + (int64_t) r * width, width);
        if (r == n_rows - 1 || (next != NULL && out[r] != next[r])) {
            return r + 1;
        }
    }
    return 0;
}

int32_t specframe_context_match(const llama_token * history, int32_t n, llama_token next, int32_t longest)
{
    /* The longest k <= longest such that the last k tokens of history were followed by next somewhere before
     * (drafting.support): each earlier place next stands is compared back, token by token, with the end. */
    int32_t limit = n - 1 < longest ? n - 1 : longest;
    int32_t best = 0;
    for (int32_t at = 1; at < n && best < limit; at++) {
        if (history[at] != next) {
            continue;
        }
        int32_t k = 0;
        while (k < limit && at - 1 - k >= 0 && history[at - 1 - k] == history[n - 1 - k]) {
            k++;
        }
        best = k > best ? k : best;
    }
    return best;
}
