/* tests/server/prompt-dump.c: the server's chat prompt for request bodies,
 * for tests/peers/tools-prompt.py to compare with Python Jinja2. It runs the
 * server's own path: openai_parse (validation, tools, arguments strings
 * parsed into objects, prefill), openai_chat_ext_check_template,
 * openai_session_input, session_render (what session_prompt encodes).
 *
 * usage: prompt-dump MODEL.gguf TEMPLATE.jinja REQUESTS.json
 * REQUESTS.json: an array of chat bodies; prints a JSON array with, per
 * body, {"prompt": text} or {"error": message, "param": p}. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf.h"
#include "engine/session/session.h"
#include "server/openai-tools.h"
#include "server/openai.h"

int main(int argc, char **argv) {
    if (argc != 4) {
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
