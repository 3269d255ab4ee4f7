/*
 * gen_gguf — writes a random-weight GGUF with a real model's exact shapes and tensor types,
 * so that speed can be measured on the real shape where the real file cannot travel (the
 * GPU check carries at most 64 MiB; the bundled model is 253 MB). Driver:
 * tools/gen-gguf/main.c (`gen-gguf`), built by `make` and `make gpu-check-bins`; it links
 * only the engine.
 *
 * The layout comes from a real GGUF when one is given (its metadata, tokenizer included, is
 * copied verbatim and every tensor keeps its name, shape and type), or from the built-in
 * table of Gemma 3 270M Q4_K_M (18 layers, 640 wide, 4 heads of 256, 1 KV head, FFN 2048,
 * 262,144 tokens; Q5_0 / Q8_0 / Q4_K / Q6_K as the published file mixes them) with a
 * synthetic vocabulary of unique pieces.
 *
 * Every tensor is filled with random blocks of its own type whose scales give each element
 * a chosen spread (norm weights near 1, the embedding 0.02, matrices 1/sqrt(n_in)), so the
 * logits are finite and spread out. The bytes depend only on the seed and the tensor's
 * name: with `f32` set every 2-D weight is written as the F32 dequantization of exactly the
 * blocks the quantized file holds (the twin used for tight GPU-vs-CPU parity, where neither
 * side quantizes activations).
 *
 * Single-threaded; allocates freely (a tool, not the serving path).
 */
#ifndef GEMMAD_GEN_GGUF_H
#define GEMMAD_GEN_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum { GEN_TWIN_F32 = 1, GEN_TWIN_BF16 = 2 };

struct gen_gguf_opts {
    const char *out;  /* file to write */
    const char *from; /* real GGUF to copy the layout and metadata from, or NULL */
    uint64_t seed;
    int f32;          /* 0, or GEN_TWIN_F32 / GEN_TWIN_BF16: every 2-D weight in that type
                       * (the dequantized twin; BF16 rounds it to nearest even) */
    int n_layer;      /* built-in table only: layers (0: 18) */
    int n_vocab;      /* built-in table only: vocabulary (0: 262144) */
};

/* Writes the file. 0, or -1 with err filled. */
int gen_gguf_write(const struct gen_gguf_opts *o, char *err, size_t errlen);

/* One random row of n elements of `type` (enum quant_type) into dst (quant_row_size
 * bytes), each element's spread about `std`. 0, or -1 for a type it cannot write (Q2_K,
 * Q3_K) or an n that is not a multiple of the block size. gen_blocks.c. */
int gen_blocks_row(uint32_t type, int64_t n, float std, uint64_t *rng, void *dst);

/* The generator's random stream (splitmix64). */
uint64_t gen_rng_next(uint64_t *state);

#endif
