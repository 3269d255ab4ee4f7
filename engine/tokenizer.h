/*
 * tokenizer — SentencePiece-style (llama.cpp "llama"/SPM) tokenizer built from the GGUF vocab:
 * pieces, scores, token types, byte fallback, control and user-defined tokens. Also the
 * "gemma4" BPE variant when the file says so.
 *
 * tok_create() builds lookup tables once (a hash from piece text to id, the special-token
 * list); afterwards the tok_vocab is immutable and any thread may encode/decode at once.
 * Piece strings point into the GGUF mapping, which must outlive the tok_vocab.
 *
 * An incremental decoder (struct tok_stream) turns a token stream into text that never
 * ends in half a UTF-8 code point; one per sequence, owned by whoever owns the sequence.
 */
#ifndef GEMMAD_TOKENIZER_H
#define GEMMAD_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct gguf_file;
struct tok_vocab;

/* Status codes (0 ok, negative on failure). */
enum tok_status {
    TOK_OK = 0,
    TOK_EFORMAT = -1, /* vocab metadata missing or inconsistent (message names the key) */
    TOK_ENOMEM = -2,
    TOK_ERANGE = -3,  /* id out of range, or input too long */
    TOK_ENOBYTE = -4, /* byte fallback needed but the vocab has no token for that byte */
    TOK_ESPACE = -5,  /* output buffer too small (tok_stream_*) */
};

enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6
};

int tok_create(const struct gguf_file *f, struct tok_vocab **out, char *err, size_t errlen);
void tok_destroy(struct tok_vocab *v);

int tok_n_vocab(const struct tok_vocab *v);
int32_t tok_bos(const struct tok_vocab *v);
int32_t tok_eos(const struct tok_vocab *v);
int tok_is_eog(const struct tok_vocab *v, int32_t id); /* <eos>, <end_of_turn>, … */
/* Effective type after llama.cpp's load-time adjustments: end-of-generation and FIM texts are
 * forced to CONTROL (in Gemma 3, "</s>" id 212 is USER_DEFINED in the file but CONTROL here). */
int tok_type(const struct tok_vocab *v, int32_t id);
/* id of a piece with exactly this text, or -1. */
int32_t tok_lookup(const struct tok_vocab *v, const char *text, size_t len);

/* Encode text. add_bos: prepend BOS when the vocab asks for it. parse_special: split out
 * control-token text such as "<start_of_turn>". Writes at most cap ids; returns the number
 * of ids the full encoding has (may exceed cap: call again with a larger buffer), or < 0. */
int tok_encode(const struct tok_vocab *v, const char *text, size_t len, int add_bos,
               int parse_special, int32_t *ids, int cap);

/* A lower bound on the ids any len bytes of text encode to (without BOS): no id stands for
 * more input bytes than the longest piece has (a piece's text is never shorter than the
 * input it covers: escaping and byte fallback only lengthen it). */
size_t tok_min_tokens(const struct tok_vocab *v, size_t len);

/* A byte range of the text. */
struct tok_span {
    size_t off, len;
};

/* tok_encode with parse_special, except that no control (or unknown) token is split out of
 * text overlapping the text_only spans (sorted, disjoint): there its text is ordinary text.
 * The chat format uses it so that message content cannot write control tokens. */
int tok_encode_spans(const struct tok_vocab *v, const char *text, size_t len, int add_bos,
                     int parse_special, const struct tok_span *text_only, int n_text_only,
                     int32_t *ids, int cap);

/* Length of the UTF-8 sequence starting at s[0] (n >= 1 bytes available):
 * > 0: a complete valid sequence of that many bytes (no overlong form, surrogate or code
 * point past U+10FFFF); 0: a valid but unfinished prefix (all n bytes belong to it);
 * < 0: invalid; -k means the first k bytes form the maximal invalid subpart. */
int tok_utf8_seq(const uint8_t *s, int n);

/* Bytes of one token's text: NORMAL pieces with U+2581 -> ' ', BYTE tokens -> the raw byte,
 * CONTROL tokens only when `special` (else empty). Writes at most cap bytes; returns the
 * full length, or < 0 for an id out of range. */
int tok_token_to_bytes(const struct tok_vocab *v, int32_t id, int special, char *buf, int cap);

/* Decode a whole id array (same rules); returns the full length like tok_encode. Like
 * llama.cpp's detokenize, a vocab with add_space_prefix drops one leading space of the first
 * piece (never the case for Gemma). */
int tok_decode(const struct tok_vocab *v, const int32_t *ids, int n, int special, char *buf,
               int cap);

/* Incremental UTF-8-safe decoder. Holds back the bytes of an incomplete code point until
 * the token that completes it arrives (or tok_stream_flush). */
struct tok_stream {
    uint8_t pending[8]; /* bytes of an unfinished UTF-8 sequence */
    int n_pending;      /* how many */
};
void tok_stream_init(struct tok_stream *s);
/* Appends the text that is now complete to out (cap bytes), decoding like
 * tok_token_to_bytes(special = 0); invalid UTF-8 becomes U+FFFD, so the output is always valid
 * UTF-8. Returns bytes written, or < 0 when out is too small (needs at most 64 + max piece
 * length bytes; TOK_STREAM_MAX is safe for Gemma vocabs, whose longest piece is 48 bytes). */
int tok_stream_push(struct tok_stream *s, const struct tok_vocab *v, int32_t id, char *out,
                    int cap);
/* Emits whatever is pending (invalid leftovers become U+FFFD). */
int tok_stream_flush(struct tok_stream *s, char *out, int cap);
#define TOK_STREAM_MAX 1024

#endif
