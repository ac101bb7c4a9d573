/* tests/server/prompt-dump.c: the server's chat prompt for request bodies,
 * for tests/peers/tools-prompt.py to compare with Python Jinja2. It runs the
 * server's own path: openai_parse (validation, tools, arguments strings
 * parsed into objects, prefill), openai_chat_ext_check_template,
 * openai_session_input, session_render (what session_prompt encodes).
 *
 * usage: prompt-dump MODEL.gguf TEMPLATE.jinja REQUESTS.json
 * REQUESTS.json: an array of chat bodies; prints a JSON array with, per
 * body, {"prompt": text} or {"error": message, "param": p}.
 *
 *        prompt-dump --output MODEL.gguf TEMPLATE.jinja BODY.json PIECES.json
 * The output side for tools-stream.mjs: the body's prompt tokenized as the
 * scheduler does, then PIECES (an array of strings: generated text, as the
 * session hands it out) through openai-chat-out.c; prints {"chunks": [the
 * stream's chunk JSON texts, role first, finish last], "response": the
 * non-stream body}. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/session/session.h"
#include "server/openai-chat-out.h"
#include "server/openai-tools.h"
#include "server/openai.h"

/* The --output mode (b: the session base, body and pieces loaded). */
static int output_mode(const struct session_base *b, json_t *body, json_t *pieces) {
    struct gen_submit sub = {.route = GEN_ROUTE_CHAT, .body = body};
    struct openai_request rq;
    char param[64] = "";
    struct strata_error e = {0};
    if (openai_parse(&sub, "m", 32000, &rq, param, sizeof param, &e) < 0) {
        fprintf(stderr, "parse: %s (%s)\n", e.message, param);
        return 1;
    }
    struct session_input in;
    openai_session_input(&rq, &in);
    struct tokenizer_ids ids = {0};
    struct openai_chat_out *stream = NULL, *whole = NULL;
    int rc = session_prompt(b, &in, &ids, &e);
    if (rc == 0)
        rc = openai_chat_out_init(&rq, b, ids.ids, (int)ids.n, &stream, &e);
    if (rc == 0)
        rc = openai_chat_out_init(&rq, b, ids.ids, (int)ids.n, &whole, &e);
    if (rc < 0 || !stream || !whole) {
        fprintf(stderr, "output: %s\n", rc < 0 ? e.message : "no split for this request");
        rc = 1;
        goto out;
    }
    struct openai_ctx oc;
    openai_ctx_init(&oc, GEN_ROUTE_CHAT, "m", false, 0x5eed);
    json_t *chunks = json_array();
    char *js = openai_chunk_role(&oc);
    json_array_append_new(chunks, json_string(js));
    free(js);
    size_t n = json_array_size(pieces);
    for (size_t i = 0; i <= n; i++) {
        const char *t = i < n ? json_string_value(json_array_get(pieces, i)) : "";
        size_t len = t ? strlen(t) : 0;
        js = openai_chat_out_chunk(stream, &oc, t ? t : "", len, i == n, NULL);
        if (js)
            json_array_append_new(chunks, json_string(js));
        free(js);
        openai_chat_out_feed(whole, t ? t : "", len, i == n, NULL);
    }
    const char *reason = openai_chat_out_finish(stream, "stop");
    js = openai_chunk_finish(&oc, reason, NULL);
    json_array_append_new(chunks, json_string(js));
    free(js);
    struct openai_usage u = {(int64_t)ids.n, 0, 0};
    char *resp = openai_response_message(&oc, openai_chat_out_message(whole, &oc),
                                         openai_chat_out_finish(whole, "stop"), NULL, &u, NULL);
    json_t *out = json_pack("{s:o, s:o}", "chunks", chunks, "response", json_loads(resp, 0, NULL));
    free(resp);
    char *s = json_dumps(out, JSON_COMPACT | JSON_ENSURE_ASCII);
    puts(s);
    free(s);
    json_decref(out);
    rc = 0;
out:
    openai_chat_out_free(stream);
    openai_chat_out_free(whole);
    tokenizer_ids_free(&ids);
    openai_request_free(&rq);
    return rc;
}

int main(int argc, char **argv) {
    bool output = argc == 6 && strcmp(argv[1], "--output") == 0;
    if (output) {
        argv++;
        argc--;
    }
    if (argc != 4 && !(output && argc == 5)) {
        fprintf(stderr, "usage: prompt-dump MODEL.gguf TEMPLATE.jinja REQUESTS.json\n");
        return 2;
    }
    struct strata_error err = {0};
    struct gguf_file *gf = gguf_open(argv[1], &err);
    if (!gf) {
        fprintf(stderr, "%s: %s\n", argv[1], err.message);
        return 1;
    }
    FILE *fp = fopen(argv[2], "rb");
    if (!fp) {
        perror(argv[2]);
        return 1;
    }
    static char tmpl[1 << 20];
    size_t tn = fread(tmpl, 1, sizeof tmpl - 1, fp);
    fclose(fp);
    tmpl[tn] = '\0';
    struct session_base_params bp = session_base_params_default();
    bp.gguf = gf;
    bp.n_vocab = 32000;
    bp.n_ctx = 1 << 20;
    bp.chat_template = tmpl;
    struct session_base *b = session_base_init(&bp, &err);
    if (!b || session_base_template_origin(b) != SESSION_TEMPLATE_GGUF) {
        fprintf(stderr, "session: %s %s\n", err.message, b ? session_base_template_note(b) : "");
        return 1;
    }
    json_error_t je;
    if (output) {
        json_t *body = json_load_file(argv[3], 0, &je);
        json_t *pieces = json_load_file(argv[4], 0, &je);
        int rc = json_is_object(body) && json_is_array(pieces) ? output_mode(b, body, pieces) : 2;
        json_decref(body);
        json_decref(pieces);
        session_base_free(b);
        gguf_close(gf);
        return rc;
    }
    json_t *reqs = json_load_file(argv[3], 0, &je);
    if (!json_is_array(reqs)) {
        fprintf(stderr, "%s: %s\n", argv[3], je.text);
        return 1;
    }
    json_t *out = json_array();
    size_t i;
    json_t *body;
    json_array_foreach(reqs, i, body) {
        struct gen_submit sub = {.route = GEN_ROUTE_CHAT, .body = body};
        struct openai_request rq;
        char param[64] = "";
        struct strata_error e = {0};
        int rc = openai_parse(&sub, "m", 32000, &rq, param, sizeof param, &e);
        if (rc == 0 && rq.ext) {
            size_t sl;
            const char *src = session_base_template_source(b, &sl);
            rc = openai_chat_ext_check_template(rq.ext, rq.messages, src, sl, param, sizeof param,
                                                &e);
        }
        if (rc == 0) {
            struct session_input in;
            openai_session_input(&rq, &in);
            char *text = NULL;
            size_t len = 0;
            rc = session_render(b, &in, &text, &len, &e);
            if (rc == 0)
                json_array_append_new(out, json_pack("{s:s%}", "prompt", text, len));
            free(text);
        }
        if (rc < 0)
            json_array_append_new(out, json_pack("{s:s, s:s}", "error", e.message, "param", param));
        openai_request_free(&rq);
    }
    char *s = json_dumps(out, JSON_COMPACT | JSON_ENSURE_ASCII);
    puts(s);
    free(s);
    json_decref(out);
    json_decref(reqs);
    session_base_free(b);
    gguf_close(gf);
    return 0;
}
