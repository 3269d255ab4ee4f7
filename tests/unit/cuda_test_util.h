/*
 * cuda_test_util — helpers shared by test_cuda.c (on a GPU) and test_cuda_host.c (host
 * emulation): loading a model, the parity bound between the CUDA and CPU forward passes,
 * and a walk over the synthetic models. Test-only; CUDA builds only.
 */
#ifndef GEMMAD_CUDA_TEST_UTIL_H
#define GEMMAD_CUDA_TEST_UTIL_H

#include <dirent.h>

#include "engine/kernels/kern.h"
#include "engine/kernels/quant.h"
#include "engine/model.h"
#include "tests/unit/harness.h"

static inline struct model *cu_load_model(const char *path) {
    if (access(path, R_OK) != 0) T_SKIP("model %s not present", path);
    kern_init(KERN_ISA_AUTO);
    struct model *m = NULL;
    char err[512];
    T_ASSERTF(model_load(path, &m, err, sizeof err) == 0, "model_load %s: %s", path, err);
    return m;
}

static inline int cu_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The bound on max |diff| / max |cpu logit| between the backends. The CPU quantizes every
 * activation to Q8_0/Q8_K (or F16) before a matmul with a quantized (or F16) weight, the CUDA
 * kernels keep activations in f32: with only F32 weights nothing is quantized and the two
 * agree to rounding order (measured ~1e-3 on the synthetic models, whose random weights
 * amplify differences); otherwise the quantization noise dominates (measured up to 0.07 on
 * the bundled model and 0.4 on the random synthetic ones). The kernels themselves are held
 * to 2e-6 against the references in test_cuda. */
static inline double cu_parity_bound(const struct model *m, int real_model) {
    int all_f32 = m->tok_embd.type == QT_F32;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const struct model_layer_w *w = &m->layer[l];
        const struct kern_weight *ws[] = {&w->wq, &w->wk,   &w->wv,       &w->wo,  &w->gate,
                                          &w->up, &w->down, &w->inp_gate, &w->proj};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]->data && ws[i]->type != QT_F32) all_f32 = 0;
    }
    if (all_f32) return 1e-2;
    return real_model ? 0.15 : 0.6;
}

/* GELU-tanh as the CPU forward (ggml's fp16 table) and the CUDA kernel compute it. */
static inline float cu_ref_gelu(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float xh = quant_f16_to_f32(quant_f32_to_f16(x));
    const float g =
        0.5f * xh *
        (1.0f + tanhf(0.79788456080286535587989211986876f * xh * (1.0f + 0.044715f * xh * xh)));
    return quant_f16_to_f32(quant_f32_to_f16(g));
}

/* Calls fn on every model in $GEMMAD_TEST_SYNTH_DIR (default build/synthetic), written by
 * tests/fixtures/synthetic/gen_synthetic.py --out DIR; SKIP when there is none. */
static inline void cu_each_synthetic(void (*fn)(struct model *m)) {
    const char *dir = getenv("GEMMAD_TEST_SYNTH_DIR");
    if (!dir) dir = "build/synthetic";
    DIR *d = opendir(dir);
    if (!d)
        T_SKIP("no synthetic models in %s (tests/fixtures/synthetic/gen_synthetic.py --out %s)",
               dir, dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 5, ".gguf")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct model *m = cu_load_model(path);
        printf("    %s\n", de->d_name);
        fn(m);
        model_free(m);
        n++;
    }
    closedir(d);
    if (!n) T_SKIP("no .gguf files in %s", dir);
}

#endif
