/* engine/gguf.c: placeholder until the reader lands. */
#include "engine/gguf.h"
