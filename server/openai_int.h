/*
 * openai_int — helpers shared by the files of the request parser (openai.c, and
 * openai_prompt.c: how content becomes prompt ids). Pure functions; any thread.
 */
#ifndef GEMMAD_SERVER_OPENAI_INT_H
#define GEMMAD_SERVER_OPENAI_INT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/chat.h"
#include "engine/tokenizer.h"
#include "server/openai.h"

/* Tokenizes text[len] into a fresh *ids (*n ids). With spans (chat), control-token text is
 * split out only outside them (the template's own text); without, nowhere; with
 * lim->allow_control_tokens, everywhere. Refuses (context_length_exceeded, param) a text
 * whose byte length alone proves it needs more than lim->n_ctx ids. 0 or -1 with e. */
int oai_encode(const struct oai_limits *lim, const char *text, size_t len, int add_bos,
               const struct tok_span *spans, int n_spans, int32_t **ids, int *n,
               const char *param, struct oai_error *e);

/* Brings messages into what the Gemma format can write (see openai_prompt.c); texts[i] is
 * cm[i]'s owned content buffer; *n shrinks. 0 or -1 with e. */
int oai_merge_turns(struct chat_msg *cm, char **texts, size_t *n, int chat_style,
                    struct oai_error *e);

/* The rendered prompt with each tool token that the server wrote into a message as its
 * grammar.h bytes (gram_token_bytes; client text cannot hold them: JSON strings are UTF-8)
 * turned into its token's text outside the text-only spans, so tokenization makes it that
 * token. *text / *spans are replaced (realloc'd) when there is any; 0 or -1 (memory). */
int oai_expand_tokens(const struct tok_vocab *v, char **text, size_t *len,
                      struct tok_span **spans, int *n_spans);

#endif
