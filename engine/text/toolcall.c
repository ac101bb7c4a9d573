/* engine/text/toolcall.c: the streaming reasoning / content / tool-call
 * splitter (see toolcall.h; the family table is toolcall-family.c).
 *
 * Two layers. The reasoning layer is incremental: it strips a leading
 * think block into reasoning text. The tool layer keeps the content text
 * and re-scans it from the last settled point on every feed (text with no
 * call in it is settled once scanned) with a small recursive scanner that
 * answers OK, NEED (the text so far is a prefix of a call: wait) or FAIL
 * (not a call: it is content). What was already sent is remembered as
 * lengths, so each feed sends only the growth of the content, of each
 * call's arguments, and the new calls' names. */
#include "engine/text/toolcall-impl.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/buf.h"

/* ---- the scanner ------------------------------------------------------------ */

enum { SC_OK = 0, SC_NEED = 1, SC_FAIL = 2 };

struct scan {
    const char *t;
    size_t n, pos;
    bool final; /* no more text will come */
};

/* One call as far as the text shows it. */
struct pcall {
    char name[256];
    bool has_name;
    size_t a0, a1;   /* arguments bytes t[a0, a1) seen so far */
    bool has_args;   /* a0 is set */
    bool args_done;  /* the arguments value ended at a1 */
    bool args_str;   /* the arguments are a JSON string (decoded at the end) */
    bool complete;   /* the call's text ended */
    char conv[1024]; /* arguments converted to JSON (Llama's name.call(k="v")), or "" */
};

static int need_or_fail(const struct scan *sc) {
    return sc->final ? SC_FAIL : SC_NEED;
}

static void skip_ws(struct scan *sc) {
    while (sc->pos < sc->n && strchr(" \t\r\n", sc->t[sc->pos]) && sc->t[sc->pos])
        sc->pos++;
}

static int lit(struct scan *sc, const char *s) {
    size_t k = strlen(s), avail = sc->n - sc->pos;
    size_t m = avail < k ? avail : k;
    if (memcmp(sc->t + sc->pos, s, m) != 0)
        return SC_FAIL;
    if (m < k)
        return need_or_fail(sc);
    sc->pos += k;
    return SC_OK;
}

/* A JSON value from pos: *end is where it ends (or the text's end, NEED). */
static int json_span(struct scan *sc, size_t *end) {
    size_t i = sc->pos;
    *end = i; /* nothing of the value yet */
    if (i >= sc->n)
        return need_or_fail(sc);
    char c = sc->t[i];
    if (c == '{' || c == '[' || c == '"') {
        int depth = 0;
        bool str = false, esc = false;
        for (; i < sc->n; i++) {
            char x = sc->t[i];
            if (str) {
                if (esc)
                    esc = false;
                else if (x == '\\')
                    esc = true;
                else if (x == '"') {
                    str = false;
                    if (depth == 0) {
                        *end = i + 1;
                        return SC_OK;
                    }
                }
            } else if (x == '"') {
                str = true;
            } else if (x == '{' || x == '[') {
                /* 64 levels: arguments deeper than that are not a model's call */
                if (++depth > 64)
                    return SC_FAIL;
            } else if (x == '}' || x == ']') {
                if (--depth == 0) {
                    *end = i + 1;
                    return SC_OK;
                }
                if (depth < 0)
                    return SC_FAIL;
            }
        }
        *end = sc->n;
        return need_or_fail(sc);
    }
    if (strchr("-0123456789tfn", c) && c) {
        while (i < sc->n && sc->t[i] && strchr("+-.0123456789eEtruefalsn", sc->t[i]))
            i++;
        *end = i;
        return i == sc->n && !sc->final ? SC_NEED : SC_OK;
    }
    return SC_FAIL;
}

static bool key_in(const char *k, const char *const keys[2]) {
    for (int i = 0; i < 2; i++)
        if (keys[i] && strcmp(k, keys[i]) == 0)
            return true;
    return false;
}

/* A decoded JSON string of t[a, b) into buf; false when not a string. */
static bool json_str(const char *t, size_t a, size_t b, char *buf, size_t cap) {
    json_t *j = json_loadb(t + a, b - a, JSON_DECODE_ANY, NULL);
    bool ok = json_is_string(j) && json_string_length(j) < cap &&
              strlen(json_string_value(j)) == json_string_length(j);
    if (ok)
        memcpy(buf, json_string_value(j), json_string_length(j) + 1);
    json_decref(j);
    return ok;
}

static int body_object(struct scan *sc, const struct toolcall_family *f, struct pcall *c) {
    int rc = lit(sc, "{");
    if (rc)
        return rc;
    for (;;) {
        skip_ws(sc);
        if (sc->pos >= sc->n)
            return need_or_fail(sc);
        if (sc->t[sc->pos] == '}') {
            sc->pos++;
            break;
        }
        size_t k0 = sc->pos, k1;
        if (sc->t[k0] != '"')
            return SC_FAIL;
        if ((rc = json_span(sc, &k1)))
            return rc;
        char key[64];
        if (!json_str(sc->t, k0, k1, key, sizeof key))
            key[0] = '\0'; /* a long or odd key: some other field */
        sc->pos = k1;
        skip_ws(sc);
        if ((rc = lit(sc, ":")))
            return rc;
        skip_ws(sc);
        size_t v0 = sc->pos, v1;
        int vr = json_span(sc, &v1);
        if (vr == SC_FAIL)
            return SC_FAIL;
        if (key_in(key, f->name_keys)) {
            if (vr)
                return vr;
            if (!json_str(sc->t, v0, v1, c->name, sizeof c->name) || !c->name[0])
                return SC_FAIL;
            c->has_name = true;
        } else if (key_in(key, f->args_keys)) {
            c->has_args = true;
            c->a0 = v0;
            c->a1 = v1;
            c->args_str = sc->t[v0] == '"';
            if (vr)
                return vr;
            c->args_done = true;
        } else if (vr) {
            return vr;
        }
        sc->pos = v1;
        skip_ws(sc);
        if (sc->pos >= sc->n)
            return need_or_fail(sc);
        if (sc->t[sc->pos] == ',') {
            sc->pos++;
            continue;
        }
        if (sc->t[sc->pos] != '}')
            return SC_FAIL;
        sc->pos++;
        break;
    }
    return c->has_name ? SC_OK : SC_FAIL;
}

/* Llama 3.1's built-in tool call, as its template writes one:
 * brave_search.call(query="...", k="v") with the values raw between quotes.
 * The arguments become a JSON object of strings (c->conv). */
static bool ident_char(char ch, bool first) {
    return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (!first && ch >= '0' && ch <= '9');
}

static int body_py_call(struct scan *sc, struct pcall *c) {
    size_t i = sc->pos, k = 0;
    while (i < sc->n && k + 1 < sizeof c->name && ident_char(sc->t[i], k == 0))
        c->name[k++] = sc->t[i++];
    c->name[k] = '\0';
    if (i == sc->n)
        return need_or_fail(sc);
    if (k == 0)
        return SC_FAIL;
    sc->pos = i;
    int rc = lit(sc, ".call(");
    if (rc)
        return rc;
    json_t *o = json_object();
    if (!o)
        return SC_FAIL;
    for (;;) {
        skip_ws(sc);
        if (sc->pos < sc->n && sc->t[sc->pos] == ')') {
            sc->pos++;
            break;
        }
        size_t k0 = sc->pos;
        while (sc->pos < sc->n && ident_char(sc->t[sc->pos], sc->pos == k0))
            sc->pos++;
        size_t k1 = sc->pos;
        if (k1 == k0) {
            rc = sc->pos < sc->n ? SC_FAIL : need_or_fail(sc);
            break;
        }
        if ((rc = lit(sc, "=\"")))
            break;
        /* the value ends at a quote followed by ", " or ")" */
        size_t v0 = sc->pos, v1 = v0;
        while (v1 < sc->n && !(sc->t[v1] == '"' && v1 + 1 < sc->n &&
                               (sc->t[v1 + 1] == ')' || sc->t[v1 + 1] == ',')))
            v1++;
        if (v1 >= sc->n) {
            rc = need_or_fail(sc);
            break;
        }
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(k1 - k0), sc->t + k0);
        json_t *v = json_stringn(sc->t + v0, v1 - v0);
        if (!v || json_object_set_new(o, key, v) < 0) {
            rc = SC_FAIL;
            break;
        }
        sc->pos = v1 + 1;
        if (sc->t[sc->pos] == ',')
            sc->pos++;
    }
    char *js = rc ? NULL : json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (rc)
        return rc;
    bool fits = js && strlen(js) < sizeof c->conv;
    if (fits)
        memcpy(c->conv, js, strlen(js) + 1);
    free(js);
    if (!fits)
        return SC_FAIL;
    c->has_name = c->has_args = c->args_done = true;
    return SC_OK;
}

/* 1: the "name" was the text name (no call). */
static int body_name_args(struct scan *sc, const struct toolcall_family *f, struct pcall *c,
                          bool *text) {
    int rc;
    if (f->name_prefix && (rc = lit(sc, f->name_prefix)))
        return rc;
    const char *e = memmem(sc->t + sc->pos, sc->n - sc->pos, f->name_end, strlen(f->name_end));
    size_t nlen = e ? (size_t)(e - (sc->t + sc->pos)) : sc->n - sc->pos;
    if (nlen >= sizeof c->name)
        return SC_FAIL;
    for (size_t i = 0; i < nlen; i++)
        if (strchr(" \t\r\n<>{}\"'()[],", sc->t[sc->pos + i]) || !sc->t[sc->pos + i])
            return SC_FAIL;
    if (!e)
        return need_or_fail(sc);
    if (nlen == 0)
        return SC_FAIL;
    memcpy(c->name, sc->t + sc->pos, nlen);
    c->name[nlen] = '\0';
    sc->pos += nlen + strlen(f->name_end);
    if (f->text_name && strcmp(c->name, f->text_name) == 0) {
        *text = true;
        return SC_OK;
    }
    c->has_name = true;
    if (f->args_prefix && (rc = lit(sc, f->args_prefix)))
        return rc;
    if (sc->pos < sc->n && sc->t[sc->pos] != '{')
        return SC_FAIL;
    size_t v1;
    rc = json_span(sc, &v1);
    if (rc == SC_FAIL)
        return rc;
    c->has_args = true;
    c->a0 = sc->pos;
    c->a1 = v1;
    if (rc)
        return rc;
    c->args_done = true;
    sc->pos = v1;
    if (f->args_suffix && (rc = lit(sc, f->args_suffix)))
        return rc;
    return SC_OK;
}

/* After a block's opening marker: its calls (appended to calls[*nc]).
 * *text: the block was Functionary's "all" (content follows). */
static int block(struct scan *sc, const struct toolcall_family *f, struct pcall *calls, int *nc,
                 int max, bool *text) {
    int rc;
    bool list = f->list_close != NULL;
    if (f->list_open) {
        skip_ws(sc);
        if ((rc = lit(sc, f->list_open)))
            return rc;
        if (strcmp(f->list_open, "[") != 0) { /* Command-R+: ```json then [ */
            skip_ws(sc);
            if ((rc = lit(sc, "[")))
                return rc;
        }
    }
    for (int item = 0;; item++) {
        skip_ws(sc);
        if (f->item_open) {
            size_t save = sc->pos;
            rc = lit(sc, f->item_open);
            if (rc == SC_FAIL && item == 0 && sc->pos == save)
                rc = SC_OK; /* the block marker was the first call's own */
            if (rc)
                return rc;
        }
        if (*nc >= max)
            return SC_FAIL;
        struct pcall *c = &calls[(*nc)++];
        memset(c, 0, sizeof *c);
        size_t at = sc->pos;
        rc = f->body == BODY_OBJECT ? body_object(sc, f, c) : body_name_args(sc, f, c, text);
        if (rc == SC_FAIL && f->py_call && at < sc->n && sc->t[at] != '{') {
            memset(c, 0, sizeof *c);
            sc->pos = at;
            rc = body_py_call(sc, c);
        }
        if (rc == SC_FAIL || *text) {
            (*nc)--;
            return rc;
        }
        if (rc)
            return rc;
        if (f->item_close) {
            skip_ws(sc);
            if ((rc = lit(sc, f->item_close)))
                return rc;
        }
        c->complete = !f->close && !list;
        if (list) {
            skip_ws(sc);
            if (sc->pos >= sc->n)
                return need_or_fail(sc);
            if (sc->t[sc->pos] == ',') {
                sc->pos++;
                continue;
            }
            if ((rc = lit(sc, f->list_close)))
                return rc;
            break;
        }
        if (f->item_open) { /* another call, or the block's end */
            skip_ws(sc);
            size_t save = sc->pos;
            rc = lit(sc, f->item_open);
            sc->pos = save;
            if (rc == SC_NEED)
                return rc;
            if (rc == SC_OK)
                continue;
        }
        break;
    }
    if (f->close) {
        skip_ws(sc);
        if ((rc = lit(sc, f->close)))
            return rc;
    }
    for (int i = 0; i < *nc; i++)
        calls[i].complete = true;
    return SC_OK;
}

/* ---- the parser -------------------------------------------------------------- */

#define MAX_CALLS 64 /* calls in one response (a model's parallel calls: a handful) */

struct call {
    char *name;
    char *args; /* owned, NUL-terminated */
    size_t args_len, args_cap;
    bool complete;
};

enum rstate { R_START, R_THINK, R_CONTENT };

struct toolcall_parser {
    const struct toolcall_family *f;
    bool tools;
    const char *think_open, *think_close;
    enum rstate rs;
    bool trim;  /* drop whitespace before the content that follows a think block */
    char *pend; /* reasoning layer: bytes not yet decided */
    size_t pend_len, pend_cap;
    char *text; /* tool layer: all content-side text (with a virtual prefix) */
    size_t text_len, text_cap;
    size_t prefix;          /* bytes of text that the prompt wrote (Functionary's ">>>") */
    size_t settled;         /* text[0, settled) holds no call: scans start here */
    size_t settled_content; /* bytes of content that text[0, settled) gave */
    char *content;          /* sent content */
    size_t content_len, content_cap;
    char *reasoning; /* sent reasoning */
    size_t reasoning_len, reasoning_cap;
    char *scratch; /* this feed's content as parsed */
    size_t scratch_len, scratch_cap;
    struct call calls[MAX_CALLS];
    int n_calls;
    struct pcall pc[MAX_CALLS];
    struct toolcall_event ev[2 * MAX_CALLS];
    int n_ev;
    size_t d_content, d_reasoning; /* this feed's delta starts in content / reasoning */
};

struct toolcall_parser_params toolcall_parser_params_default(void) {
    return (struct toolcall_parser_params){0};
}

static bool ends_with_trimmed(const char *s, size_t n, const char *suffix) {
    while (n && strchr(" \t\r\n", s[n - 1]))
        n--;
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

struct toolcall_parser *toolcall_parser_init(const struct toolcall_parser_params *pp,
                                             struct strata_error *err) {
    struct toolcall_parser *p = calloc(1, sizeof *p);
    if (!p) {
        strata_error_set(err, STRATA_E_NOMEM, "toolcall: out of memory");
        return NULL;
    }
    p->f = pp->family ? pp->family : toolcall_generic();
    p->tools = pp->tools;
    p->think_open = pp->think_close ? pp->think_open : NULL;
    p->think_close = pp->think_open ? pp->think_close : NULL;
    p->rs = p->think_open ? R_START : R_CONTENT;
    const char *tail = pp->prompt_tail ? pp->prompt_tail : "";
    if (p->think_open && ends_with_trimmed(tail, pp->prompt_tail_len, p->think_open))
        p->rs = R_THINK; /* the generation prompt opened the block (DeepSeek R1) */
    /* Functionary v3.2's generation prompt ends with the first ">>>" */
    if (p->tools && p->f->text_name && pp->prompt_tail_len >= strlen(p->f->open[0]) &&
        memcmp(tail + pp->prompt_tail_len - strlen(p->f->open[0]), p->f->open[0],
               strlen(p->f->open[0])) == 0) {
        p->prefix = strlen(p->f->open[0]);
        if (strata_append(&p->text, &p->text_len, &p->text_cap, p->f->open[0], p->prefix) < 0) {
            toolcall_parser_free(p);
            strata_error_set(err, STRATA_E_NOMEM, "toolcall: out of memory");
            return NULL;
        }
    }
    return p;
}

void toolcall_parser_free(struct toolcall_parser *p) {
    if (!p)
        return;
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].args);
    }
    free(p->pend);
    free(p->text);
    free(p->content);
    free(p->reasoning);
    free(p->scratch);
    free(p);
}

/* Longest suffix of s[0, n) that is a proper prefix of m. */
static size_t partial_suffix(const char *s, size_t n, const char *m) {
    size_t k = strlen(m);
    for (size_t l = k - 1 < n ? k - 1 : n; l > 0; l--)
        if (memcmp(s + n - l, m, l) == 0)
            return l;
    return 0;
}

static int put(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
    return n ? strata_append(b, len, cap, s, n) : 0;
}

/* Appends text[a, a + n) to this scan's content, less the bytes the prompt
 * wrote (the virtual prefix is never content). */
static int text_put(struct toolcall_parser *p, size_t a, size_t n) {
    size_t b = a + n;
    if (a < p->prefix)
        a = p->prefix;
    return b > a ? put(&p->scratch, &p->scratch_len, &p->scratch_cap, p->text + a, b - a) : 0;
}

/* The content text scanned: fills p->scratch (the content) and p->pc. */
static int scan_tools(struct toolcall_parser *p, bool final, int *n_pc) {
    const struct toolcall_family *f = p->f;
    const char *t = p->text;
    size_t n = p->text_len, pos = p->settled;
    p->scratch_len = p->settled_content; /* the settled part's content is kept */
    *n_pc = 0;
    bool any_block = false;
    while (pos < n) {
        /* the earliest opening marker at or after pos */
        size_t best = n, blen = 0;
        for (int k = 0; k < 2 && f->open[k]; k++) {
            const char *m = memmem(t + pos, n - pos, f->open[k], strlen(f->open[k]));
            if (m && (size_t)(m - t) < best) {
                best = (size_t)(m - t);
                blen = strlen(f->open[k]);
            }
        }
        bool bare = false;
        if (f->bare_start && pos == 0 && p->settled == 0) {
            size_t w = 0;
            while (w < n && strchr(" \t\r\n", t[w]) && t[w])
                w++;
            if (w < n && t[w] == '{' && w < best) {
                best = w;
                blen = 0;
                bare = true;
            } else if (w == n && !final) {
                return 0; /* only whitespace yet: it may still become a bare call */
            }
        }
        /* whitespace between and after calls is layout, not content */
        bool blank = any_block;
        for (size_t i = pos; blank && i < best; i++)
            blank = t[i] && strchr(" \t\r\n", t[i]);
        if (best == n && blank)
            break;
        if (best == n) {
            size_t hold = 0;
            if (!final)
                for (int k = 0; k < 2 && f->open[k]; k++) {
                    size_t h = partial_suffix(t + pos, n - pos, f->open[k]);
                    hold = h > hold ? h : hold;
                }
            bool rest_blank = any_block;
            for (size_t i = pos; rest_blank && i < n - hold; i++)
                rest_blank = t[i] && strchr(" \t\r\n", t[i]);
            if (!rest_blank && text_put(p, pos, n - pos - hold) < 0)
                return STRATA_E_NOMEM;
            /* text with no call in it yet is settled: the next scan starts
             * after it (a long answer is then scanned once, not per token) */
            if (*n_pc == 0 && !any_block && n - hold > p->prefix) {
                p->settled = n - hold;
                p->settled_content = p->scratch_len;
            }
            break;
        }
        if (best > pos && !bare && !blank && text_put(p, pos, best - pos) < 0)
            return STRATA_E_NOMEM;
        if (any_block && !f->repeat_open) { /* one block per response: the rest is text */
            if (text_put(p, best, n - best) < 0)
                return STRATA_E_NOMEM;
            break;
        }
        struct scan sc = {t, n, best + blen, final};
        int before = *n_pc;
        bool text = false;
        int rc = block(&sc, f, p->pc, n_pc, MAX_CALLS, &text);
        if (rc == SC_NEED)
            return 0; /* the rest may still be a call: hold it */
        if (rc == SC_FAIL) {
            *n_pc = before;
            /* the generation ended inside a call already announced (a length
             * limit): the rest is that call's text, sent as the call's
             * (incomplete) arguments, not as content too */
            if (final && before < p->n_calls)
                break;
            /* not a call: the marker's first byte is text, scan on after it */
            if (text_put(p, best, 1) < 0)
                return STRATA_E_NOMEM;
            pos = best + 1;
            continue;
        }
        any_block |= !text;
        pos = sc.pos;
    }
    return 0;
}

static int add_event(struct toolcall_parser *p, int index, const char *name, const char *args,
                     size_t n) {
    if (p->n_ev >= (int)(sizeof p->ev / sizeof p->ev[0]))
        return 0;
    p->ev[p->n_ev++] = (struct toolcall_event){index, name, args ? args : "", n};
    return 0;
}

/* The tool layer: text appended; sends growth. */
static int tools_feed(struct toolcall_parser *p, const char *s, size_t n, bool final) {
    if (!p->tools) /* no tools: all content */
        return put(&p->content, &p->content_len, &p->content_cap, s, n) < 0 ? STRATA_E_NOMEM : 0;
    if (put(&p->text, &p->text_len, &p->text_cap, s, n) < 0)
        return STRATA_E_NOMEM;
    int n_pc = 0;
    int rc = scan_tools(p, final, &n_pc);
    if (rc < 0)
        return rc;
    /* content: the parsed content only grows (a prefix of what was sent is kept) */
    if (p->scratch_len > p->content_len &&
        put(&p->content, &p->content_len, &p->content_cap, p->scratch + p->content_len,
            p->scratch_len - p->content_len) < 0)
        return STRATA_E_NOMEM;
    for (int i = 0; i < n_pc; i++) {
        const struct pcall *pc = &p->pc[i];
        if (i >= p->n_calls) {
            if (!pc->has_name)
                break;
            struct call *c = &p->calls[p->n_calls];
            memset(c, 0, sizeof *c);
            if (!(c->name = strdup(pc->name)))
                return STRATA_E_NOMEM;
            p->n_calls++;
            add_event(p, i, c->name, NULL, 0);
        }
        struct call *c = &p->calls[i];
        size_t old = c->args_len;
        if (pc->conv[0]) {
            if (pc->args_done && old == 0 &&
                put(&c->args, &c->args_len, &c->args_cap, pc->conv, strlen(pc->conv)) < 0)
                return STRATA_E_NOMEM;
        } else if (pc->has_args && pc->args_str) {
            if (pc->args_done && old == 0) {
                json_t *j = json_loadb(p->text + pc->a0, pc->a1 - pc->a0, JSON_DECODE_ANY, NULL);
                const char *v = json_is_string(j) ? json_string_value(j) : "";
                int r = put(&c->args, &c->args_len, &c->args_cap, v, strlen(v));
                json_decref(j);
                if (r < 0)
                    return STRATA_E_NOMEM;
            }
        } else if (pc->has_args && pc->a1 - pc->a0 > old) {
            if (put(&c->args, &c->args_len, &c->args_cap, p->text + pc->a0 + old,
                    pc->a1 - pc->a0 - old) < 0)
                return STRATA_E_NOMEM;
        } else if (!pc->has_args && pc->complete && old == 0) {
            if (put(&c->args, &c->args_len, &c->args_cap, "{}", 2) < 0)
                return STRATA_E_NOMEM;
        }
        if (c->args_len > old)
            add_event(p, i, NULL, c->args + old, c->args_len - old);
        c->complete = pc->complete;
    }
    return 0;
}

static int reasoning_put(struct toolcall_parser *p, const char *s, size_t n) {
    if (p->reasoning_len == 0) /* the block's leading newline is layout, not reasoning */
        while (n && strchr(" \t\r\n", *s) && *s) {
            s++;
            n--;
        }
    return put(&p->reasoning, &p->reasoning_len, &p->reasoning_cap, s, n) < 0 ? STRATA_E_NOMEM : 0;
}

static int content_put(struct toolcall_parser *p, const char *s, size_t n, bool final) {
    if (p->trim) {
        while (n && strchr(" \t\r\n", *s) && *s) {
            s++;
            n--;
        }
        if (n)
            p->trim = false;
    }
    return tools_feed(p, s, n, final);
}

int toolcall_parser_feed(struct toolcall_parser *p, const char *text, size_t len, bool final,
                         struct toolcall_delta *d, struct strata_error *err) {
    memset(d, 0, sizeof *d);
    d->content = d->reasoning = "";
    p->n_ev = 0;
    p->d_content = p->content_len;
    p->d_reasoning = p->reasoning_len;
    int rc = 0;
    if (p->rs == R_CONTENT) {
        rc = content_put(p, text, len, final);
    } else {
        if (put(&p->pend, &p->pend_len, &p->pend_cap, text, len) < 0) {
            rc = STRATA_E_NOMEM;
            goto out;
        }
        const char *s = p->pend ? p->pend : "";
        size_t n = p->pend_len, used = 0;
        if (p->rs == R_START) {
            size_t w = 0;
            while (w < n && strchr(" \t\r\n", s[w]) && s[w])
                w++;
            size_t k = strlen(p->think_open), avail = n - w;
            if (avail >= k && memcmp(s + w, p->think_open, k) == 0) {
                p->rs = R_THINK;
                used = w + k;
            } else if (!final && avail < k && memcmp(s + w, p->think_open, avail) == 0) {
                goto out; /* whitespace or part of the marker: undecided */
            } else {
                p->rs = R_CONTENT;
                rc = content_put(p, s, n, final);
                p->pend_len = 0;
                goto out;
            }
        }
        /* R_THINK */
        const char *m = memmem(s + used, n - used, p->think_close, strlen(p->think_close));
        if (m) {
            size_t at = (size_t)(m - s);
            if ((rc = reasoning_put(p, s + used, at - used)) < 0)
                goto out;
            p->rs = R_CONTENT;
            p->trim = true;
            size_t after = at + strlen(p->think_close);
            rc = content_put(p, s + after, n - after, final);
            p->pend_len = 0;
        } else {
            size_t hold = final ? 0 : partial_suffix(s + used, n - used, p->think_close);
            if ((rc = reasoning_put(p, s + used, n - used - hold)) < 0)
                goto out;
            memmove(p->pend, s + n - hold, hold);
            p->pend_len = hold;
        }
    }
out:
    if (rc < 0) {
        p->n_ev = 0;
        return strata_error_set(err, rc, "toolcall: out of memory");
    }
    d->content = p->content ? p->content + p->d_content : "";
    d->content_len = p->content_len - p->d_content;
    d->reasoning = p->reasoning ? p->reasoning + p->d_reasoning : "";
    d->reasoning_len = p->reasoning_len - p->d_reasoning;
    d->events = p->ev;
    d->n_events = p->n_ev;
    return 0;
}

int toolcall_parser_n_calls(const struct toolcall_parser *p) {
    return p->n_calls;
}

void toolcall_parser_call(const struct toolcall_parser *p, int i, struct toolcall_call *out) {
    const struct call *c = &p->calls[i];
    *out = (struct toolcall_call){c->name, c->args ? c->args : "", c->args_len, c->complete};
}

const char *toolcall_parser_content(const struct toolcall_parser *p, size_t *len) {
    *len = p->content_len;
    return p->content ? p->content : "";
}

const char *toolcall_parser_reasoning(const struct toolcall_parser *p, size_t *len) {
    *len = p->reasoning_len;
    return p->reasoning ? p->reasoning : "";
}
