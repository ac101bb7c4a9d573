/* tests/engine/text/test-toolcall.c: the template families' tool-call and
 * reasoning output (engine/text/toolcall.h): each family's text parsed
 * whole and fed one byte at a time (a call split across many tokens), the
 * streamed pieces equal to the final result, text that is not a call kept
 * as content, and detection from the fixture templates. */
#include "engine/text/toolcall.h"

#include <jansson.h>

#include "tests/harness.h"

#define DS_CALLS_BEGIN                                                                             \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "begin\xef\xbd\x9c>"
#define DS_CALLS_END                                                                               \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN                                                                              \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "begin\xef\xbd\x9c>"
#define DS_CALL_END                                                                                \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "end\xef\xbd\x9c>"
#define DS_SEP                                                                                     \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "sep\xef\xbd\x9c>"

struct result {
    char content[4096], reasoning[4096];
    int n_calls;
    char names[8][64];
    char args[8][1024];       /* from the stream's pieces */
    char final_args[8][1024]; /* toolcall_parser_call after the end */
    bool complete[8];
};

/* Feeds text in pieces of `step` bytes (0: whole) and collects the deltas. */
static void run(const char *family, bool tools, const char *think, const char *tail,
                const char *text, size_t step, struct result *r) {
    memset(r, 0, sizeof *r);
    struct toolcall_parser_params pp = toolcall_parser_params_default();
    pp.family = family ? toolcall_family_by_name(family) : NULL;
    ck_assert(!family || pp.family);
    pp.tools = tools;
    if (think) {
        pp.think_open = "<think>";
        pp.think_close = "</think>";
    }
    pp.prompt_tail = tail;
    pp.prompt_tail_len = tail ? strlen(tail) : 0;
    struct strata_error err = {0};
    struct toolcall_parser *p = toolcall_parser_init(&pp, &err);
    ck_assert_ptr_nonnull(p);
    size_t n = strlen(text), pos = 0;
    bool last = false;
    while (!last) {
        size_t k = step ? (n - pos < step ? n - pos : step) : n - pos;
        last = pos + k >= n;
        struct toolcall_delta d;
        ck_assert_int_eq(toolcall_parser_feed(p, text + pos, k, false, &d, &err), 0);
        pos += k;
        for (int f = 0; f < 2; f++) {
            if (f == 1) {
                if (!last)
                    break;
                ck_assert_int_eq(toolcall_parser_feed(p, "", 0, true, &d, &err), 0);
            }
            strncat(r->content, d.content, d.content_len);
            strncat(r->reasoning, d.reasoning, d.reasoning_len);
            for (int e = 0; e < d.n_events; e++) {
                const struct toolcall_event *ev = &d.events[e];
                ck_assert_int_lt(ev->index, 8);
                if (ev->name) {
                    ck_assert_int_eq(ev->index, r->n_calls); /* announced once, in order */
                    snprintf(r->names[r->n_calls++], 64, "%s", ev->name);
                }
                ck_assert_int_lt(ev->index, r->n_calls);
                strncat(r->args[ev->index], ev->args, ev->args_len);
            }
        }
    }
    ck_assert_int_eq(toolcall_parser_n_calls(p), r->n_calls);
    for (int i = 0; i < r->n_calls; i++) {
        struct toolcall_call c;
        toolcall_parser_call(p, i, &c);
        ck_assert_str_eq(c.name, r->names[i]);
        snprintf(r->final_args[i], sizeof r->final_args[i], "%.*s", (int)c.args_len, c.args);
        ck_assert_str_eq(r->final_args[i], r->args[i]); /* the pieces add up to the result */
        r->complete[i] = c.complete;
    }
    size_t cl;
    ck_assert_str_eq(toolcall_parser_content(p, &cl), r->content);
    toolcall_parser_free(p);
}

/* Whole, one byte at a time, and 3 bytes at a time give one result. */
static void run_all(const char *family, bool tools, const char *think, const char *tail,
                    const char *text, struct result *r) {
    static const size_t steps[] = {1, 3, 7};
    run(family, tools, think, tail, text, 0, r);
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        struct result q;
        run(family, tools, think, tail, text, steps[s], &q);
        ck_assert_str_eq(q.content, r->content);
        ck_assert_str_eq(q.reasoning, r->reasoning);
        ck_assert_int_eq(q.n_calls, r->n_calls);
        for (int i = 0; i < r->n_calls; i++) {
            ck_assert_str_eq(q.names[i], r->names[i]);
            ck_assert_str_eq(q.args[i], r->args[i]);
        }
    }
}

/* args parse as JSON equal to want (a JSON text) */
static void args_eq(const char *args, const char *want) {
    json_t *a = json_loads(args, 0, NULL), *b = json_loads(want, 0, NULL);
    ck_assert_msg(a && b && json_equal(a, b), "arguments '%s' != '%s'", args, want);
    json_decref(a);
    json_decref(b);
}

START_TEST(hermes) {
    struct result r;
    run_all("hermes", true, NULL, NULL,
            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
            "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", "
            "\"arguments\": {\"a\": 1, \"b\": [2, {\"c\": \"}\\\"\"}]}}\n</tool_call>",
            &r);
    ck_assert_str_eq(r.content, "Let me check.\n");
    ck_assert_int_eq(r.n_calls, 2);
    ck_assert_str_eq(r.names[0], "get_weather");
    ck_assert_str_eq(r.args[0], "{\"city\": \"Paris\", \"unit\": \"c\"}");
    ck_assert_str_eq(r.names[1], "add");
    args_eq(r.args[1], "{\"a\": 1, \"b\": [2, {\"c\": \"}\\\"\"}]}");
    ck_assert(r.complete[0] && r.complete[1]);
}
END_TEST

START_TEST(hermes_not_a_call) {
    struct result r;
    /* a marker followed by no JSON object, and a '<' that looks like one */
    run_all("hermes", true, NULL, NULL, "a <tool_call> b <tool_ c < d", &r);
    ck_assert_str_eq(r.content, "a <tool_call> b <tool_ c < d");
    ck_assert_int_eq(r.n_calls, 0);
    /* no tools: the call text is content */
    run_all("hermes", false, NULL, NULL, "<tool_call>{\"name\":\"x\",\"arguments\":{}}</tool_call>",
            &r);
    ck_assert_int_eq(r.n_calls, 0);
    ck_assert_str_eq(r.content, "<tool_call>{\"name\":\"x\",\"arguments\":{}}</tool_call>");
}
END_TEST

/* Held back exactly while the text may still be a marker. */
START_TEST(holdback) {
    struct toolcall_parser_params pp = toolcall_parser_params_default();
    pp.family = toolcall_family_by_name("hermes");
    pp.tools = true;
    struct toolcall_parser *p = toolcall_parser_init(&pp, NULL);
    ck_assert_ptr_nonnull(p);
    struct toolcall_delta d;
    ck_assert_int_eq(toolcall_parser_feed(p, "Hi <tool", strlen("Hi <tool"), false, &d, NULL), 0);
    ck_assert_int_eq((int)d.content_len, 3); /* "Hi ": "<tool" may begin <tool_call> */
    ck_assert_int_eq(toolcall_parser_feed(p, "box", strlen("box"), false, &d, NULL), 0);
    ck_assert_int_eq((int)d.content_len, 8); /* "<toolbox" cannot: out at once */
    ck_assert(memcmp(d.content, "<toolbox", 8) == 0);
    ck_assert_int_eq(
        toolcall_parser_feed(p, " <tool_call>{\"na", strlen(" <tool_call>{\"na"), false, &d, NULL),
        0);
    ck_assert_int_eq((int)d.content_len, 1); /* the space; the call's start waits */
    ck_assert_int_eq(d.n_events, 0);
    ck_assert_int_eq(toolcall_parser_feed(p, "me\": \"f\", \"arguments\": {\"a\"",
                                          strlen("me\": \"f\", \"arguments\": {\"a\""), false, &d,
                                          NULL),
                     0);
    ck_assert_int_eq(d.n_events, 2); /* the name, then the arguments so far */
    ck_assert_str_eq(d.events[0].name, "f");
    ck_assert_int_eq((int)d.events[1].args_len, 4);
    ck_assert(memcmp(d.events[1].args, "{\"a\"", 4) == 0);
    toolcall_parser_free(p);
}
END_TEST

START_TEST(hermes_cut) {
    struct result r;
    /* a length limit in the middle of the arguments: the call is incomplete */
    run_all(NULL, true, NULL, NULL, "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"ab", &r);
    ck_assert_int_eq(r.n_calls, 1);
    ck_assert_str_eq(r.names[0], "f");
    ck_assert_str_eq(r.args[0], "{\"q\": \"ab");
    ck_assert(!r.complete[0]);
    ck_assert_str_eq(r.content, ""); /* the call's text is the call, not content too */
}
END_TEST

START_TEST(llama3) {
    struct result r;
    run_all("llama3", true, NULL, NULL,
            " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", &r);
    ck_assert_int_eq(r.n_calls, 1);
    ck_assert_str_eq(r.content, "");
    ck_assert_str_eq(r.names[0], "get_weather");
    ck_assert_str_eq(r.args[0], "{\"city\": \"Paris\"}");
    run_all("llama3", true, NULL, NULL,
            "<|python_tag|>{\"type\": \"function\", \"name\": \"add\", \"parameters\": {\"a\": 1}}",
            &r);
    ck_assert_int_eq(r.n_calls, 1);
    ck_assert_str_eq(r.names[0], "add");
    ck_assert_str_eq(r.args[0], "{\"a\": 1}");
    /* a built-in tool, as the 3.1 template writes it */
    run_all("llama3", true, NULL, NULL,
            "<|python_tag|>brave_search.call(query=\"weather, Paris\", count=\"3\")", &r);
    ck_assert_int_eq(r.n_calls, 1);
    ck_assert_str_eq(r.names[0], "brave_search");
    args_eq(r.args[0], "{\"query\": \"weather, Paris\", \"count\": \"3\"}");
    ck_assert_str_eq(r.content, "");
    /* python code after the tag is no call: content */
    run_all("llama3", true, NULL, NULL, "<|python_tag|>print(1)", &r);
    ck_assert_int_eq(r.n_calls, 0);
    ck_assert_str_eq(r.content, "<|python_tag|>print(1)");
    /* JSON that is not a call stays content; so does prose */
    run_all("llama3", true, NULL, NULL, "{\"answer\": 42}", &r);
    ck_assert_int_eq(r.n_calls, 0);
    ck_assert_str_eq(r.content, "{\"answer\": 42}");
    run_all("llama3", true, NULL, NULL, "The answer is {\"name\": \"x\"}", &r);
    ck_assert_int_eq(r.n_calls, 0);
    ck_assert_str_eq(r.content, "The answer is {\"name\": \"x\"}");
}
END_TEST

START_TEST(mistral) {
    struct result r;
    run_all("mistral", true, NULL, NULL,
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, "
            "\"id\": \"abcdefghi\"}, {\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]",
            &r);
    ck_assert_int_eq(r.n_calls, 2);
    ck_assert_str_eq(r.names[0], "get_weather");
    ck_assert_str_eq(r.args[0], "{\"city\": \"Paris\"}");
    ck_assert_str_eq(r.names[1], "add");
    ck_assert_str_eq(r.args[1], "{\"a\": 1, \"b\": 2}");
    ck_assert_str_eq(r.content, "");
}
END_TEST

START_TEST(functionary_v3_2) {
    struct result r;
    /* the generation prompt wrote the first ">>>" */
    run_all(
        "functionary_v3_2", true, NULL, "<|start_header_id|>assistant<|end_header_id|>\n\n>>>",
        "all\nChecking two cities.>>>get_weather\n{\"city\": \"Paris\"}>>>get_weather\n{\"city\": "
        "\"Rome\"}",
        &r);
    ck_assert_str_eq(r.content, "Checking two cities.");
    ck_assert_int_eq(r.n_calls, 2);
    ck_assert_str_eq(r.args[0], "{\"city\": \"Paris\"}");
    ck_assert_str_eq(r.args[1], "{\"city\": \"Rome\"}");
    /* not a recipient line: all content, the prompt's ">>>" never in it */
    run_all("functionary_v3_2", true, NULL, ">>>", "Hello there", &r);
    ck_assert_str_eq(r.content, "Hello there");
    ck_assert_int_eq(r.n_calls, 0);
    run_all("functionary_v3_2", true, NULL, ">>>", "get_weather\n{\"city\": \"Oslo\"}", &r);
    ck_assert_int_eq(r.n_calls, 1);
    ck_assert_str_eq(r.names[0], "get_weather");
}
END_TEST

START_TEST(functionary_v3_1) {
    struct result r;
    run_all("functionary_v3_1", true, NULL, NULL,
            "Sure. <function=get_weather>{\"city\": \"Paris\"}</function><function=add>{\"a\": "
            "1}</function>",
            &r);
    ck_assert_str_eq(r.content, "Sure. ");
    ck_assert_int_eq(r.n_calls, 2);
    ck_assert_str_eq(r.names[1], "add");
    ck_assert_str_eq(r.args[1], "{\"a\": 1}");
}
END_TEST

START_TEST(command_r) {
    struct result r;
    run_all("command_r_plus", true, NULL, NULL,
            "Action: ```json\n[\n    {\n        \"tool_name\": \"get_weather\",\n        "
            "\"parameters\": {\"city\": \"Paris\"}\n    }\n]\n```",
            &r);
    ck_assert_int_eq(r.n_calls, 1);
    ck_assert_str_eq(r.names[0], "get_weather");
    ck_assert_str_eq(r.args[0], "{\"city\": \"Paris\"}");
    run_all("command_r7b", true, NULL, NULL,
            "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"add\", "
            "\"parameters\": {\"a\": 1, \"b\": 2}}\n]<|END_ACTION|>",
            &r);
    ck_assert_int_eq(r.n_calls, 1);
    ck_assert_str_eq(r.names[0], "add");
    ck_assert_str_eq(r.args[0], "{\"a\": 1, \"b\": 2}");
}
END_TEST

START_TEST(firefunction) {
    struct result r;
    run_all("firefunction_v2", true, NULL, NULL,
            " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", &r);
    ck_assert_int_eq(r.n_calls, 1);
    ck_assert_str_eq(r.content, " ");
    ck_assert_str_eq(r.args[0], "{\"city\": \"Paris\"}");
}
END_TEST

START_TEST(deepseek_r1) {
    struct result r;
    /* the generation prompt opened <think>: reasoning first, then a call */
    run_all("deepseek_r1", true, "think",
            "<\xef\xbd\x9c"
            "Assistant\xef\xbd\x9c><think>\n",
            "The user wants weather.\n</think>\n\n" DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP
            "get_weather\n```json\n{\"city\": \"Paris\"}\n```" DS_CALL_END DS_CALL_BEGIN
            "function" DS_SEP "add\n```json\n{\"a\": 1}\n```" DS_CALL_END DS_CALLS_END,
            &r);
    ck_assert_str_eq(r.reasoning, "The user wants weather.\n");
    ck_assert_str_eq(r.content, "");
    ck_assert_int_eq(r.n_calls, 2);
    ck_assert_str_eq(r.names[0], "get_weather");
    ck_assert_str_eq(r.args[0], "{\"city\": \"Paris\"}");
    ck_assert_str_eq(r.names[1], "add");
    ck_assert(r.complete[0] && r.complete[1]);
}
END_TEST

START_TEST(reasoning) {
    struct result r;
    /* Qwen3-style: the model opens the block itself */
    run_all(NULL, false, "think", "<|im_start|>assistant\n",
            "<think>\nstep one\nstep two\n</think>\n\nThe answer is 4.", &r);
    ck_assert_str_eq(r.reasoning, "step one\nstep two\n");
    ck_assert_str_eq(r.content, "The answer is 4.");
    /* no block: all content, even a later "<think>" */
    run_all(NULL, false, "think", "", "Four. <think>x</think>", &r);
    ck_assert_str_eq(r.reasoning, "");
    ck_assert_str_eq(r.content, "Four. <think>x</think>");
    /* cut inside the block: what came is reasoning */
    run_all(NULL, false, "think", "<think>\n", "still thinking </thi", &r);
    ck_assert_str_eq(r.reasoning, "still thinking </thi");
    ck_assert_str_eq(r.content, "");
    /* reasoning then a Hermes call */
    run_all("hermes", true, "think", "",
            "<think>call it</think><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
            &r);
    ck_assert_str_eq(r.reasoning, "call it");
    ck_assert_int_eq(r.n_calls, 1);
    ck_assert_str_eq(r.args[0], "{}");
}
END_TEST

START_TEST(detect_fixtures) {
    static const struct {
        const char *file, *family;
        bool think;
    } want[] = {
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes", false},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes", false},
        {"Qwen-Qwen2.5-7B-Instruct.jinja", "hermes", false},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3", false},
        {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3", false},
        {"meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3", false},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral", false},
        {"meetkai-functionary-medium-v3.1.jinja", "functionary_v3_1", false},
        {"meetkai-functionary-medium-v3.2.jinja", "functionary_v3_2", false},
        {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", "command_r_plus", false},
        {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "command_r7b", true},
        {"fireworks-ai-llama-3-firefunction-v2.jinja", "firefunction_v2", false},
        {"llama-cpp-deepseek-r1.jinja", "deepseek_r1", true},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek_r1", true},
        {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek_r1", true},
        {"google-gemma-2-2b-it.jinja", "generic", false},
        {"microsoft-Phi-3.5-mini-instruct.jinja", "generic", false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char rel[256], path[512];
        snprintf(rel, sizeof rel, "fixtures/templates/%s", want[i].file);
        size_t n = 0;
        char *src = test_read_file(test_shared_path(path, sizeof path, rel), &n);
        ck_assert_msg(src, "missing %s", path);
        const char *o, *c;
        ck_assert_str_eq(toolcall_family_name(toolcall_detect(src, n)), want[i].family);
        ck_assert_msg(toolcall_detect_reasoning(src, n, &o, &c) == want[i].think, "%s",
                      want[i].file);
        free(src);
    }
}
END_TEST

static Suite *toolcall_suite(void) {
    Suite *s = suite_create("toolcall");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, hermes);
    tcase_add_test(tc, hermes_not_a_call);
    tcase_add_test(tc, hermes_cut);
    tcase_add_test(tc, holdback);
    tcase_add_test(tc, llama3);
    tcase_add_test(tc, mistral);
    tcase_add_test(tc, functionary_v3_2);
    tcase_add_test(tc, functionary_v3_1);
    tcase_add_test(tc, command_r);
    tcase_add_test(tc, firefunction);
    tcase_add_test(tc, deepseek_r1);
    tcase_add_test(tc, reasoning);
    tcase_add_test(tc, detect_fixtures);
    suite_add_tcase(s, tc);
    return s;
}

STRATA_TEST_MAIN("toolcall", toolcall_suite)
