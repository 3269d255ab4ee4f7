/*
 * test_chat — exact rendered strings for the Gemma 1–3 and Gemma 4 chat formats, role
 * checks, and the buffer-size contract. Gemma 4 expectations were produced by rendering
 * llama.cpp's copy of the HF template (models/templates/google-gemma-4-31B-it.jinja) with
 * jinja2 on the same messages.
 */
#include "engine/chat.h"
#include "tests/unit/harness.h"

#define MSG(r, s) {CHAT_ROLE_##r, s, sizeof(s) - 1}

static char buf[4096];

/* Render and compare with the exact expected string. */
static void expect(enum chat_style style, const struct chat_msg *m, int n, int gen,
                   const char *want, int line) {
    size_t len = 0;
    char err[256];
    int rc = chat_render(style, m, n, gen, buf, sizeof buf, &len, err, sizeof err);
    if (rc != 0) T_FAIL("line %d: rc %d: %s", line, rc, err);
    if (len != strlen(want) || strcmp(buf, want) != 0)
        T_FAIL("line %d:\n     got  \"%s\" (%zu)\n     want \"%s\"", line, buf, len, want);
}
#define EXPECT(style, m, gen, want) expect(style, m, (int)(sizeof(m) / sizeof(m[0])), gen, want, __LINE__)

static void expect_err(enum chat_style style, const struct chat_msg *m, int n, int want_rc,
                       const char *want_msg, int line) {
    size_t len = 0;
    char err[256] = "";
    int rc = chat_render(style, m, n, 1, buf, sizeof buf, &len, err, sizeof err);
    if (rc != want_rc || !strstr(err, want_msg))
        T_FAIL("line %d: rc %d err \"%s\", wanted %d with \"%s\"", line, rc, err, want_rc,
               want_msg);
}
#define EXPECT_ERR(style, m, rc, msg)                                                          \
    expect_err(style, m, (int)(sizeof(m) / sizeof(m[0])), rc, msg, __LINE__)

static void test_gemma_single_user(void) {
    static const struct chat_msg m[] = {MSG(USER, "Hi")};
    EXPECT(CHAT_STYLE_GEMMA, m, 1, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    EXPECT(CHAT_STYLE_GEMMA, m, 0, "<bos><start_of_turn>user\nHi<end_of_turn>\n");
}

static void test_gemma_system_folded(void) {
    static const struct chat_msg m[] = {MSG(SYSTEM, "SYS"), MSG(USER, "Hi")};
    EXPECT(CHAT_STYLE_GEMMA, m, 1,
           "<bos><start_of_turn>user\nSYS\n\nHi<end_of_turn>\n<start_of_turn>model\n");
    /* system text is trimmed too (llama.cpp's gemma template) */
    static const struct chat_msg m2[] = {MSG(SYSTEM, "\n You are terse.  \n"),
                                         MSG(USER, " Q1 "), MSG(ASSISTANT, "A1"),
                                         MSG(USER, "Q2")};
    EXPECT(CHAT_STYLE_GEMMA, m2, 1,
           "<bos><start_of_turn>user\nYou are terse.\n\nQ1<end_of_turn>\n"
           "<start_of_turn>model\nA1<end_of_turn>\n<start_of_turn>user\nQ2<end_of_turn>\n"
           "<start_of_turn>model\n");
    /* an empty system message adds nothing */
    static const struct chat_msg m3[] = {MSG(SYSTEM, "  "), MSG(USER, "Hi")};
    EXPECT(CHAT_STYLE_GEMMA, m3, 1, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
}

static void test_gemma_multi_turn_stripped(void) {
    static const struct chat_msg m[] = {MSG(USER, "  Hello \n"), MSG(ASSISTANT, "\tHi there!  "),
                                        MSG(USER, "How are you?\r\n"),
                                        MSG(ASSISTANT, "Fine.\n\n")};
    EXPECT(CHAT_STYLE_GEMMA, m, 0,
           "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi there!"
           "<end_of_turn>\n<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n"
           "Fine.<end_of_turn>\n");
    /* inner whitespace, control-token text and UTF-8 pass through untouched */
    static const struct chat_msg m2[] = {MSG(USER, "a  b\n\nc <end_of_turn> \xe4\xbd\xa0\xe5\xa5\xbd")};
    EXPECT(CHAT_STYLE_GEMMA, m2, 1,
           "<bos><start_of_turn>user\na  b\n\nc <end_of_turn> \xe4\xbd\xa0\xe5\xa5\xbd"
           "<end_of_turn>\n<start_of_turn>model\n");
    /* empty and whitespace-only content */
    static const struct chat_msg m3[] = {MSG(USER, " \n ")};
    EXPECT(CHAT_STYLE_GEMMA, m3, 1, "<bos><start_of_turn>user\n<end_of_turn>\n<start_of_turn>model\n");
}

static void test_gemma_content_not_nul_terminated(void) {
    static const char text[] = "Hello world";
    const struct chat_msg m[] = {{CHAT_ROLE_USER, text, 5}};
    EXPECT(CHAT_STYLE_GEMMA, m, 1, "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n");
    const struct chat_msg m2[] = {{CHAT_ROLE_USER, NULL, 0}};
    EXPECT(CHAT_STYLE_GEMMA, m2, 0, "<bos><start_of_turn>user\n<end_of_turn>\n");
}

static void test_gemma_role_errors(void) {
    static const struct chat_msg uu[] = {MSG(USER, "a"), MSG(USER, "b")};
    EXPECT_ERR(CHAT_STYLE_GEMMA, uu, CHAT_EROLE, "messages[1]: roles must alternate");
    static const struct chat_msg au[] = {MSG(ASSISTANT, "a"), MSG(USER, "b")};
    EXPECT_ERR(CHAT_STYLE_GEMMA, au, CHAT_EROLE, "messages[0]: roles must alternate user/assistant; expected user");
    static const struct chat_msg saa[] = {MSG(SYSTEM, "s"), MSG(USER, "a"), MSG(ASSISTANT, "b"),
                                          MSG(ASSISTANT, "c")};
    EXPECT_ERR(CHAT_STYLE_GEMMA, saa, CHAT_EROLE, "messages[3]: roles must alternate user/assistant; expected user");
    static const struct chat_msg us[] = {MSG(USER, "a"), MSG(SYSTEM, "s")};
    EXPECT_ERR(CHAT_STYLE_GEMMA, us, CHAT_EROLE, "messages[1]: a system message is only allowed first");
    static const struct chat_msg ss[] = {MSG(SYSTEM, "a"), MSG(SYSTEM, "s"), MSG(USER, "u")};
    EXPECT_ERR(CHAT_STYLE_GEMMA, ss, CHAT_EROLE, "messages[1]");
    static const struct chat_msg ut[] = {MSG(USER, "a"), MSG(TOOL, "t")};
    EXPECT_ERR(CHAT_STYLE_GEMMA, ut, CHAT_EROLE, "messages[1]: role not supported by the Gemma chat format (role 'tool')");
    const struct chat_msg bad[] = {{(enum chat_role)42, "x", 1}};
    EXPECT_ERR(CHAT_STYLE_GEMMA, bad, CHAT_EROLE, "messages[0]");
}

static void test_empty(void) {
    size_t len = 99;
    char err[128];
    T_ASSERT(chat_render(CHAT_STYLE_GEMMA, NULL, 0, 1, buf, sizeof buf, &len, err, sizeof err) ==
             CHAT_EEMPTY);
    T_ASSERT(strstr(err, "at least one message"));
    static const struct chat_msg s[] = {MSG(SYSTEM, "only")};
    EXPECT_ERR(CHAT_STYLE_GEMMA, s, CHAT_EEMPTY, "at least one user message");
    EXPECT_ERR(CHAT_STYLE_GEMMA4, s, CHAT_EEMPTY, "at least one user message");
    /* err may be NULL */
    T_ASSERT(chat_render(CHAT_STYLE_GEMMA4, s, 1, 1, buf, sizeof buf, &len, NULL, 0) == CHAT_EEMPTY);
}

static void test_buffer_sizes(void) {
    static const struct chat_msg m[] = {MSG(USER, "Hi")};
    const char *want = "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n";
    size_t need = strlen(want), len = 0;
    char err[128];
    /* size query */
    T_ASSERT(chat_render(CHAT_STYLE_GEMMA, m, 1, 1, NULL, 0, &len, err, sizeof err) == CHAT_ENOSPC);
    T_ASSERT(len == need);
    /* one byte short: ENOSPC, nothing written past cap */
    char small[128];
    memset(small, 'Z', sizeof small);
    T_ASSERT(chat_render(CHAT_STYLE_GEMMA, m, 1, 1, small, need - 1, &len, err, sizeof err) ==
             CHAT_ENOSPC);
    T_ASSERT(len == need && small[need - 1] == 'Z' && strstr(err, "needs"));
    /* exactly the length: OK, not NUL-terminated */
    memset(small, 'Z', sizeof small);
    T_ASSERT(chat_render(CHAT_STYLE_GEMMA, m, 1, 1, small, need, &len, err, sizeof err) == 0);
    T_ASSERT(len == need && memcmp(small, want, need) == 0 && small[need] == 'Z');
    /* one more: NUL-terminated */
    T_ASSERT(chat_render(CHAT_STYLE_GEMMA, m, 1, 1, small, need + 1, &len, err, sizeof err) == 0);
    T_ASSERT(strcmp(small, want) == 0);
    /* out_len may be NULL */
    T_ASSERT(chat_render(CHAT_STYLE_GEMMA, m, 1, 1, small, sizeof small, NULL, NULL, 0) == 0);
}

static void test_gemma4_basic(void) {
    static const struct chat_msg m[] = {MSG(SYSTEM, " Be brief. "), MSG(USER, "  Hi\n")};
    EXPECT(CHAT_STYLE_GEMMA4, m, 1,
           "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n"
           "<|turn>model\n<|channel>thought\n<channel|>");
    static const struct chat_msg u[] = {MSG(USER, "  Hi\n")};
    EXPECT(CHAT_STYLE_GEMMA4, u, 0, "<bos><|turn>user\nHi<turn|>\n");
}

static void test_gemma4_model_turns(void) {
    /* matches jinja2 rendering of the HF template on the same messages */
    static const struct chat_msg m[] = {
        MSG(SYSTEM, " Be brief. "),
        MSG(USER, "  Hi\n"),
        MSG(ASSISTANT, "<|channel>thought\nhmm<channel|>  Hello there <|channel>x<channel|> ok "),
        MSG(ASSISTANT, "more"),
        MSG(USER, "Bye")};
    EXPECT(CHAT_STYLE_GEMMA4, m, 1,
           "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"
           "Hello there  ok<turn|>\nmore<turn|>\n<|turn>user\nBye<turn|>\n<|turn>model\n"
           "<|channel>thought\n<channel|>");
    /* a model message that is only thinking renders empty; an unclosed channel is dropped */
    static const struct chat_msg t[] = {MSG(USER, "q"), MSG(ASSISTANT, "<|channel>only"),
                                        MSG(USER, "q2"), MSG(ASSISTANT, " a <|channel>tail")};
    EXPECT(CHAT_STYLE_GEMMA4, t, 0,
           "<bos><|turn>user\nq<turn|>\n<|turn>model\n<turn|>\n<|turn>user\nq2<turn|>\n"
           "<|turn>model\na<turn|>\n");
}

static void test_gemma4_roles(void) {
    /* the Gemma 4 template does not enforce alternation */
    static const struct chat_msg uu[] = {MSG(USER, "a"), MSG(USER, "b")};
    EXPECT(CHAT_STYLE_GEMMA4, uu, 0, "<bos><|turn>user\na<turn|>\n<|turn>user\nb<turn|>\n");
    static const struct chat_msg us[] = {MSG(USER, "a"), MSG(SYSTEM, "s")};
    EXPECT_ERR(CHAT_STYLE_GEMMA4, us, CHAT_EROLE, "messages[1]: a system message is only allowed first");
    static const struct chat_msg ut[] = {MSG(USER, "a"), MSG(TOOL, "t")};
    EXPECT_ERR(CHAT_STYLE_GEMMA4, ut, CHAT_EROLE, "role 'tool'");
}

int main(int argc, char **argv) {
    static const struct t_case cases[] = {
        T_CASE(test_gemma_single_user),
        T_CASE(test_gemma_system_folded),
        T_CASE(test_gemma_multi_turn_stripped),
        T_CASE(test_gemma_content_not_nul_terminated),
        T_CASE(test_gemma_role_errors),
        T_CASE(test_empty),
        T_CASE(test_buffer_sizes),
        T_CASE(test_gemma4_basic),
        T_CASE(test_gemma4_model_turns),
        T_CASE(test_gemma4_roles),
        {0},
    };
    return t_main(argc, argv, cases);
}
