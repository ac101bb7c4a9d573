/* engine/text/toolcall-family.c: the template families (how each writes
 * tool calls), their detection from a template's source, the reasoning
 * markers and the forced-call forms (see toolcall.h). */
#include <stdlib.h>
#include <string.h>

#include "engine/text/toolcall-impl.h"

/* Detection order: the most specific first (Hermes 3 and Firefunction are
 * Llama 3 templates too). Marker texts are the fixture templates' own
 * (../shared/fixtures/templates). */
static const struct toolcall_family families[] = {
    {.name = "deepseek_r1",
     .form = {.open = "<\xef\xbd\x9ctool\xe2\x96\x81"
                      "calls\xe2\x96\x81"
                      "begin\xef\xbd\x9c>",
              .call_open = "<\xef\xbd\x9ctool\xe2\x96\x81"
                           "call\xe2\x96\x81"
                           "begin\xef\xbd\x9c>function<\xef\xbd\x9ctool\xe2\x96\x81"
                           "sep\xef\xbd\x9c>",
              .name_close = "\n```json\n",
              .call_close = "\n```<\xef\xbd\x9ctool\xe2\x96\x81"
                            "call\xe2\x96\x81"
                            "end\xef\xbd\x9c>",
              .sep = "",
              .close = "<\xef\xbd\x9ctool\xe2\x96\x81"
                       "calls\xe2\x96\x81"
                       "end\xef\xbd\x9c>"},
     .control = true,
     .detect = {"tool\xe2\x96\x81"
                "calls\xe2\x96\x81"
                "begin"},
     .open = {"<\xef\xbd\x9ctool\xe2\x96\x81"
              "calls\xe2\x96\x81"
              "begin\xef\xbd\x9c>",
              "<\xef\xbd\x9ctool\xe2\x96\x81"
              "call\xe2\x96\x81"
              "begin\xef\xbd\x9c>"},
     .item_open = "<\xef\xbd\x9ctool\xe2\x96\x81"
                  "call\xe2\x96\x81"
                  "begin\xef\xbd\x9c>",
     .item_close = "<\xef\xbd\x9ctool\xe2\x96\x81"
                   "call\xe2\x96\x81"
                   "end\xef\xbd\x9c>",
     .close = "<\xef\xbd\x9ctool\xe2\x96\x81"
              "calls\xe2\x96\x81"
              "end\xef\xbd\x9c>",
     .body = BODY_NAME_ARGS,
     .name_prefix = "function<\xef\xbd\x9ctool\xe2\x96\x81"
                    "sep\xef\xbd\x9c>",
     .name_end = "\n",
     .args_prefix = "```json\n",
     .args_suffix = "\n```"},
    {.name = "command_r7b",
     .form = {.open = "<|START_ACTION|>[",
              .sep = ", ",
              .close = "]<|END_ACTION|>",
              .object = true,
              .name_key = "tool_name",
              .args_key = "parameters"},
     .control = true,
     .detect = {"<|START_ACTION|>"},
     .open = {"<|START_ACTION|>"},
     .list_open = "[",
     .list_close = "]",
     .close = "<|END_ACTION|>",
     .body = BODY_OBJECT,
     .name_keys = {"tool_name", "name"},
     .args_keys = {"parameters", "arguments"}},
    {.name = "command_r_plus",
     .form = {.open = "Action: ```json\n[",
              .sep = ", ",
              .close = "]\n```",
              .object = true,
              .name_key = "tool_name",
              .args_key = "parameters"},
     .detect = {"Action:", "tool_name"},
     .open = {"Action:"},
     .list_open = "```json",
     .list_close = "]",
     .close = "```",
     .body = BODY_OBJECT,
     .name_keys = {"tool_name", "name"},
     .args_keys = {"parameters", "arguments"}},
    {.name = "functionary_v3_2",
     .form = {.name_close = "\n", .sep = ">>>"},
     .detect = {">>>all"},
     .open = {">>>"},
     .body = BODY_NAME_ARGS,
     .name_end = "\n",
     .text_name = "all",
     .repeat_open = true},
    {.name = "functionary_v3_1",
     .form = {.call_open = "<function=", .name_close = ">", .call_close = "</function>", .sep = ""},
     .detect = {"<function="},
     .open = {"<function="},
     .close = "</function>",
     .body = BODY_NAME_ARGS,
     .name_end = ">",
     .repeat_open = true},
    {.name = "firefunction_v2",
     .form = {.open = " functools[",
              .sep = ", ",
              .close = "]",
              .object = true,
              .name_key = "name",
              .args_key = "arguments"},
     .detect = {"functools["},
     .open = {"functools"},
     .list_open = "[",
     .list_close = "]",
     .body = BODY_OBJECT,
     .name_keys = {"name"},
     .args_keys = {"arguments", "parameters"}},
    {.name = "mistral",
     .form = {.open = "[TOOL_CALLS][",
              .sep = ", ",
              .close = "]",
              .object = true,
              .name_key = "name",
              .args_key = "arguments"},
     .control = true,
     .detect = {"[TOOL_CALLS]"},
     .open = {"[TOOL_CALLS]"},
     .list_open = "[",
     .list_close = "]",
     .body = BODY_OBJECT,
     .name_keys = {"name"},
     .args_keys = {"arguments", "parameters"}},
    {.name = "hermes",
     .form = {.call_open = "<tool_call>\n",
              .call_close = "\n</tool_call>",
              .sep = "\n",
              .object = true,
              .name_key = "name",
              .args_key = "arguments"},
     .detect = {"<tool_call>"},
     .open = {"<tool_call>"},
     .close = "</tool_call>",
     .body = BODY_OBJECT,
     .name_keys = {"name"},
     .args_keys = {"arguments", "parameters"},
     .repeat_open = true},
    {.name = "llama3",
     .form = {.object = true, .name_key = "name", .args_key = "parameters"},
     .control = true,
     .py_call = true,
     .detect = {"ipython", "<|start_header_id|>"},
     .open = {"<|python_tag|>"},
     .bare_start = true,
     .body = BODY_OBJECT,
     .name_keys = {"name"},
     .args_keys = {"parameters", "arguments"}},
};
#define N_FAMILIES (sizeof(families) / sizeof(families[0]))
/* the generic form (templates of no family, ChatML): Hermes */
const struct toolcall_family *toolcall_generic(void) {
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (strcmp(families[i].name, "hermes") == 0)
            return &families[i];
    STRATA_ASSERT(!"the family table has a hermes row");
    return &families[0];
}

static bool contains(const char *s, size_t n, const char *needle) {
    return needle && memmem(s, n, needle, strlen(needle)) != NULL;
}

const struct toolcall_family *toolcall_detect(const char *src, size_t len) {
    if (!src)
        return NULL;
    for (size_t i = 0; i < N_FAMILIES; i++) {
        const struct toolcall_family *f = &families[i];
        bool all = true;
        for (int k = 0; k < 2 && f->detect[k]; k++)
            all &= contains(src, len, f->detect[k]);
        if (all)
            return f;
    }
    return NULL;
}

const char *toolcall_family_name(const struct toolcall_family *f) {
    return f ? f->name : "generic";
}

void toolcall_forced_form(const struct toolcall_family *f, struct toolcall_form *out) {
    *out = (f ? f : toolcall_generic())->form;
}

bool toolcall_family_control(const struct toolcall_family *f) {
    return f && f->control;
}

const struct toolcall_family *toolcall_family_by_name(const char *name) {
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (strcmp(families[i].name, name) == 0)
            return &families[i];
    return NULL;
}

bool toolcall_detect_reasoning(const char *src, size_t len, const char **open, const char **close) {
    if (src && contains(src, len, "</think>")) {
        *open = "<think>";
        *close = "</think>";
        return true;
    }
    if (src && contains(src, len, "<|END_THINKING|>")) {
        *open = "<|START_THINKING|>";
        *close = "<|END_THINKING|>";
        return true;
    }
    *open = *close = NULL;
    return false;
}
