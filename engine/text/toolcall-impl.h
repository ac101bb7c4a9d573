/* engine/text/toolcall-impl.h: the family table's row, shared by
 * toolcall-family.c (the table, detection, forced forms) and toolcall.c
 * (the scanner and the parser). */
#ifndef STRATA_TOOLCALL_IMPL_H
#define STRATA_TOOLCALL_IMPL_H

#include "engine/text/toolcall.h"

enum body_kind { BODY_OBJECT, BODY_NAME_ARGS };

struct toolcall_family {
    const char *name;
    const char *detect[2]; /* every one must occur in the template source */
    const char *open[2];   /* markers that open a block of calls */
    bool bare_start;       /* a '{' at the very start of the output opens one too */
    const char *list_open; /* after the marker: the calls form a list ("[" ... "]") */
    const char *list_close;
    const char *item_open;  /* before each call (DeepSeek) */
    const char *item_close; /* after each call (DeepSeek) */
    const char *close;      /* after the block */
    enum body_kind body;
    const char *name_keys[2]; /* BODY_OBJECT: the key of the name ... */
    const char *args_keys[2]; /* ... and of the arguments */
    const char *name_prefix;  /* BODY_NAME_ARGS: before the name */
    const char *name_end;     /* ... the name ends at this */
    const char *args_prefix;  /* ... then this, the arguments object, this */
    const char *args_suffix;
    const char *text_name;     /* a "name" that means text follows (Functionary's "all") */
    bool repeat_open;          /* several blocks, each with its marker (else one block) */
    bool control;              /* its markers are control tokens (their text must be kept) */
    bool py_call;              /* also name.call(k="v", ...) (Llama 3.1's built-in tools) */
    struct toolcall_form form; /* how a forced call is written (toolcall_forced_form) */
};

/* The generic form (templates of no family, ChatML): Hermes'. */
const struct toolcall_family *toolcall_generic(void);

#endif
