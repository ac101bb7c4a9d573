/* engine/session/session-prompt.c: the session base (tokenizer, template
 * choice) and prompt assembly: render, encode, BOS rule, context check (see
 * session.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/buf.h"
#include "engine/gguf/gguf.h"
#include "engine/session/session-impl.h"
#include "engine/text/template.h"

struct session_base_params session_base_params_default(void) {
    return (struct session_base_params){.gguf = NULL, .n_vocab = 0, .n_ctx = 0};
}

/* The vocabulary text of a special token ("<s>") for the template's
 * bos_token / eos_token; "" when the model has none. owned: free() */
static char *special_text(const struct tokenizer *tok, int32_t id) {
    size_t len = 0;
    const char *p = id == TOKENIZER_NULL ? NULL : tokenizer_piece(tok, id, &len);
    return p ? strndup(p, len) : strdup("");
}

/* Picks the template: the GGUF's when present and parsable, else ChatML. */
static int pick_template(struct session_base *b, const struct gguf_file *gf, const char *override,
                         struct strata_error *err) {
    struct gguf_str src = {0};
    if (override) {
        src.ptr = override;
        src.len = strlen(override);
    }
    if (!override && (gguf_find_kv(gf, "tokenizer.chat_template") < 0 ||
                      gguf_get_str(gf, "tokenizer.chat_template", &src, NULL) < 0)) {
        b->origin = SESSION_TEMPLATE_CHATML_ABSENT;
    } else {
        /* a copy: the template outlives the caller's file */
        b->tmpl_src = strndup(src.ptr ? src.ptr : "", (size_t)src.len);
        if (!b->tmpl_src)
            return strata_error_set(err, STRATA_E_NOMEM, "session: out of memory");
        struct strata_error perr = {0};
        b->tmpl = template_parse(b->tmpl_src, (size_t)src.len, &perr);
        if (b->tmpl) {
            b->origin = SESSION_TEMPLATE_GGUF;
            return 0;
        }
        b->origin = SESSION_TEMPLATE_CHATML_UNPARSABLE;
        snprintf(b->note, sizeof b->note, "tokenizer.chat_template: %s", perr.message);
        free(b->tmpl_src);
        b->tmpl_src = NULL;
    }
    if (b->origin == SESSION_TEMPLATE_CHATML_ABSENT)
        snprintf(b->note, sizeof b->note, "no tokenizer.chat_template");
    const char *chatml = template_chatml_source();
    b->tmpl = template_parse(chatml, strlen(chatml), err);
    return b->tmpl ? 0 : (err && err->code ? err->code : STRATA_E_TEMPLATE);
}

struct session_base *session_base_init(const struct session_base_params *params,
                                       struct strata_error *err) {
    if (!params || !params->gguf || params->n_vocab < 1 || params->n_ctx < 1) {
        strata_error_set(err, STRATA_E_INVALID, "session: a GGUF, n_vocab and n_ctx >= 1 required");
        return NULL;
    }
    struct session_base *b = calloc(1, sizeof *b);
    if (!b) {
        strata_error_set(err, STRATA_E_NOMEM, "session: out of memory");
        return NULL;
    }
    b->n_vocab = params->n_vocab;
    b->n_ctx = params->n_ctx;
    pthread_mutex_init(&b->gv_lock, NULL);
    if (!(b->tok = tokenizer_init_gguf(params->gguf, err)))
        goto fail;
    if (pick_template(b, params->gguf, params->chat_template, err) < 0)
        goto fail;
    b->bos_text = special_text(b->tok, tokenizer_bos(b->tok));
    b->eos_text = special_text(b->tok, tokenizer_eos(b->tok));
    if (!b->bos_text || !b->eos_text) {
        strata_error_set(err, STRATA_E_NOMEM, "session: out of memory");
        goto fail;
    }
    return b;
fail:
    session_base_free(b);
    return NULL;
}

void session_base_free(struct session_base *b) {
    if (!b)
        return;
    grammar_vocab_free(b->gvocab);
    pthread_mutex_destroy(&b->gv_lock);
    free(b->eos_text);
    free(b->bos_text);
    template_free(b->tmpl);
    free(b->tmpl_src);
    tokenizer_free(b->tok);
    free(b);
}

const struct tokenizer *session_base_tokenizer(const struct session_base *b) {
    return b->tok;
}

int session_base_n_ctx(const struct session_base *b) {
    return b->n_ctx;
}

int session_base_n_vocab(const struct session_base *b) {
    return b->n_vocab;
}

enum session_template_origin session_base_template_origin(const struct session_base *b) {
    return b->origin;
}

const char *session_base_template_note(const struct session_base *b) {
    return b->origin == SESSION_TEMPLATE_GGUF ? "" : b->note;
}

const char *session_base_template_source(const struct session_base *b, size_t *len) {
    const char *src = b->tmpl_src ? b->tmpl_src : template_chatml_source();
    *len = strlen(src);
    return src;
}

int32_t session_base_warmup_token(const struct session_base *b) {
    int32_t bos = tokenizer_bos(b->tok);
    return bos != TOKENIZER_NULL && bos < b->n_vocab ? bos : 0;
}

/* Where the content of the last message ends in a render, or 0 when the
 * content cannot be found (the template dropped or changed it). The
 * content is searched as the last untrusted occurrence, so the same text in
 * the template's own bytes is not taken for it. */
static size_t content_end(const struct template_output *out, const char *c, size_t n) {
    if (n == 0 || n > out->len)
        return 0;
    for (size_t at = out->len - n + 1; at-- > 0;) {
        if (memcmp(out->text + at, c, n) != 0)
            continue;
        for (size_t r = 0; r < out->n_untrusted; r++) {
            const struct template_range *u = &out->untrusted[r];
            if (at >= u->offset && at + n <= u->offset + u->length)
                return at + n;
        }
    }
    return 0;
}

/* Cuts a render to its first len bytes (untrusted ranges with it). */
static void cut_output(struct template_output *out, size_t len) {
    out->len = len;
    out->text[len] = '\0';
    size_t k = 0;
    for (size_t r = 0; r < out->n_untrusted; r++) {
        struct template_range *u = &out->untrusted[r];
        if (u->offset >= len)
            break;
        if (u->offset + u->length > len)
            u->length = len - u->offset;
        k++;
    }
    out->n_untrusted = k;
}

/* The assistant prefill's fallback: the earlier messages with the
 * generation prompt, then the content as untrusted text. */
static int render_prefix_plus(const struct session_base *b, struct template_inputs *in,
                              const char *c, size_t n, struct template_output *out,
                              struct strata_error *err) {
    const size_t n_msg = json_array_size(in->messages);
    json_t *head = json_array();
    for (size_t i = 0; head && i + 1 < n_msg; i++)
        json_array_append(head, json_array_get(in->messages, i));
    if (!head)
        return strata_error_set(err, STRATA_E_NOMEM, "session: out of memory");
    in->messages = head;
    in->add_generation_prompt = true;
    int rc = template_render(b->tmpl, in, NULL, out, err);
    json_decref(head);
    if (rc < 0)
        return rc;
    size_t len = out->len, cap = len + 1;
    struct template_range *u =
        realloc(out->untrusted, (out->n_untrusted + 1) * sizeof(*out->untrusted));
    if (!u || strata_append(&out->text, &len, &cap, c, n) < 0) {
        if (u)
            out->untrusted = u;
        return strata_error_set(err, STRATA_E_NOMEM, "session: out of memory");
    }
    out->untrusted = u;
    u[out->n_untrusted++] = (struct template_range){out->len, n};
    out->len = len;
    return 0;
}

/* Renders a chat input (the prefill rule included). */
static int render(const struct session_base *b, const struct session_input *si,
                  struct template_output *out, struct strata_error *err) {
    struct template_inputs in = template_inputs_default();
    in.messages = si->messages;
    in.tools = si->tools;
    in.extra_vars = si->extra_vars;
    in.add_generation_prompt = !si->continue_last;
    in.bos_token = b->bos_text;
    in.eos_token = b->eos_text;
    const json_t *last = json_array_get(si->messages, json_array_size(si->messages) - 1);
    const json_t *c = json_object_get(last, "content");
    if (si->continue_last && !json_is_string(c))
        return strata_error_set(err, STRATA_E_INVALID, "session: prefill needs string content");
    int rc = template_render(b->tmpl, &in, NULL, out, err);
    if (rc < 0 || !si->continue_last)
        return rc;
    size_t end = content_end(out, json_string_value(c), json_string_length(c));
    if (end) {
        cut_output(out, end);
        return 0;
    }
    template_output_free(out);
    return render_prefix_plus(b, &in, json_string_value(c), json_string_length(c), out, err);
}

int session_render(const struct session_base *b, const struct session_input *in, char **text,
                   size_t *len, struct strata_error *err) {
    *text = NULL;
    *len = 0;
    if (!b || !in || !in->messages)
        return strata_error_set(err, STRATA_E_INVALID, "session: no messages");
    struct template_output out = {0};
    int rc = render(b, in, &out, err);
    if (rc == 0) {
        *text = out.text;
        *len = out.len;
        out.text = NULL;
    }
    template_output_free(&out);
    return rc;
}

/* Renders the messages through the template and encodes the text with the
 * message bytes untrusted. */
static int chat_ids(const struct session_base *b, const struct session_input *si,
                    struct tokenizer_ids *ids, struct strata_error *err) {
    struct template_output out = {0};
    int rc = render(b, si, &out, err);
    if (rc == 0) {
        struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
        eo.parse_special = true;
        /* same layout: tokenizer.h's tokenizer_range mirrors template_range */
        _Static_assert(sizeof(struct tokenizer_range) == sizeof(struct template_range),
                       "tokenizer_range and template_range differ");
        eo.untrusted = (const struct tokenizer_range *)out.untrusted;
        eo.n_untrusted = out.n_untrusted;
        rc = tokenizer_encode(b->tok, out.text, out.len, &eo, ids, err);
    }
    template_output_free(&out);
    return rc;
}

int session_check_prompt(const struct session_base *b, size_t n_prompt, struct strata_error *err) {
    if (n_prompt == 0)
        return strata_error_set(err, STRATA_E_INVALID, "the prompt is empty (no tokens)");
    if (n_prompt >= (size_t)b->n_ctx)
        return strata_error_set(err, STRATA_E_CONTEXT_LENGTH,
                                "This model's maximum context length is %d tokens. However, your "
                                "messages resulted in %zu tokens.",
                                b->n_ctx, n_prompt);
    return 0;
}

int session_prompt(const struct session_base *b, const struct session_input *in,
                   struct tokenizer_ids *out, struct strata_error *err) {
    if (!b || !in || !out || (!in->messages && !in->text))
        return strata_error_set(err, STRATA_E_INVALID, "session: no prompt");
    struct tokenizer_ids ids = {0};
    int rc;
    if (in->messages) {
        rc = chat_ids(b, in, &ids, err);
    } else {
        struct tokenizer_encode_opts eo = tokenizer_encode_opts_default();
        rc = tokenizer_encode(b->tok, in->text, in->len, &eo, &ids, err);
    }
    if (rc < 0)
        goto fail;
    /* a template that writes bos_token itself plus add_bos: keep one BOS (llama.cpp warns) */
    const int32_t bos = tokenizer_bos(b->tok);
    if (ids.n >= 2 && bos != TOKENIZER_NULL && ids.ids[0] == bos && ids.ids[1] == bos) {
        memmove(ids.ids, ids.ids + 1, (ids.n - 1) * sizeof(int32_t));
        ids.n--;
    }
    if ((rc = session_check_prompt(b, ids.n, err)) < 0)
        goto fail;
    if (out->n == 0 && !out->ids) {
        *out = ids; /* the common case: no copy */
        return 0;
    }
    if (strata_grow((void **)&out->ids, &out->cap, out->n + ids.n, sizeof(int32_t)) < 0) {
        rc = strata_error_set(err, STRATA_E_NOMEM, "session: out of memory");
        goto fail;
    }
    memcpy(out->ids + out->n, ids.ids, ids.n * sizeof(int32_t));
    out->n += ids.n;
    tokenizer_ids_free(&ids);
    return 0;
fail:
    tokenizer_ids_free(&ids);
    return rc < 0 ? rc : STRATA_E_INTERNAL;
}
