/* fuzz/fuzz-gguf.c: libFuzzer target for the GGUF reader. Opens the input
 * with gguf_open_memory and, when it validates, touches every accessor:
 * each key through every typed getter, each array element (nested arrays
 * included, bounded), each tensor's lookup, element count and first/last
 * data byte. ASan+UBSan turn any out-of-range read into a finding.
 *
 * Build: CC=clang-14 meson setup build-fuzz -Dfuzz=true ... (fuzz/smoke.sh). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"

/* Caps the work per input so a valid file with a million-element array does
 * not turn one execution into seconds. */
#define TOUCH_BUDGET 200000

static uint64_t sink;

static void touch_value(const struct gguf_file *f, const struct gguf_value *v, long *budget) {
    if (--*budget < 0)
        return;
    switch (v->type) {
    case GGUF_TYPE_STRING:
        if (v->str.len)
            sink += (unsigned char)v->str.ptr[0] + (unsigned char)v->str.ptr[v->str.len - 1];
        break;
    case GGUF_TYPE_ARRAY:
        for (uint64_t i = 0; i<v->arr.n && * budget> 0; i++) {
            struct gguf_value e = gguf_arr_get(f, v, i);
            if (v->arr.elem_type == GGUF_TYPE_STRING) {
                struct gguf_str s = gguf_arr_str(f, v, i);
                sink += s.len;
            } else if (v->arr.elem_type != GGUF_TYPE_ARRAY) {
                sink += gguf_arr_uint(v, i) + (uint64_t)gguf_arr_int(v, i);
                double d = gguf_arr_float(v, i);
                sink += d == d;
            }
            touch_value(f, &e, budget);
        }
        break;
    default:
        sink += v->u64;
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct strata_error err = {0};
    struct gguf_file *f = gguf_open_memory(data, size, &err);
    if (!f) {
        if (err.code == 0 || err.message[0] == '\0')
            abort(); /* every failure must say why */
        return 0;
    }
    sink += gguf_version(f) + gguf_alignment(f) + gguf_data_offset(f) + gguf_file_size(f);
    sink += (uintptr_t)gguf_file_base(f) + strlen(gguf_path(f));
    long budget = TOUCH_BUDGET;
    char key[256];
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const struct gguf_kv *kv = gguf_kv_at(f, i);
        touch_value(f, &kv->value, &budget);
        sink += strlen(gguf_type_name(kv->value.type));
        if (kv->key.len >= sizeof(key) || memchr(kv->key.ptr, 0, kv->key.len))
            continue;
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = '\0';
        if (gguf_find_kv(f, key) != i)
            abort(); /* keys are unique, so lookup must find this one */
        uint64_t u;
        int64_t s;
        double d;
        bool b;
        struct gguf_str str;
        struct gguf_value arr;
        char buf[16];
        gguf_get_uint(f, key, &u, &err);
        gguf_get_int(f, key, &s, &err);
        gguf_get_float(f, key, &d, &err);
        gguf_get_bool(f, key, &b, &err);
        gguf_get_str(f, key, &str, &err);
        gguf_get_arr(f, key, &arr, &err);
        gguf_get_str_buf(f, key, buf, sizeof(buf), &err);
        sink += gguf_str_eq(kv->key, key);
    }
    char name[256];
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(f, i);
        const uint8_t *p = t->data;
        sink += p[0] + p[t->n_bytes - 1] + (uint64_t)gguf_tensor_n_elements(t);
        if (t->name.len >= sizeof(name) || memchr(t->name.ptr, 0, t->name.len))
            continue;
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = '\0';
        if (gguf_find_tensor(f, name) != t)
            abort();
    }
    gguf_find_kv(f, "general.architecture");
    gguf_find_tensor(f, "token_embd.weight");
    gguf_close(f);
    return 0;
}
