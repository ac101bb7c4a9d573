#version 450
/* gpu/shaders/op_attn_rope.comp: op_attn_split.comp's decode attention
 * with op_rope_kv.comp's work inside (vkops_attention with a rope; the
 * kernel is op_attn_split_body.glsl with ROPE). Each workgroup norms and
 * ropes its own q heads (the arithmetic of op_rope_kv, in
 * op_rope_head.glsl); the workgroup of the chunk that holds the token's own
 * position also makes the new K and V row, writes it into the cache and
 * uses it for that position. One dispatch and one barrier fewer a layer of
 * a decode step. Valid only where no other token of the batch reads the
 * new row: one token a sequence (the caller's promise). */
#define ROPE
#include "op_attn_split_body.glsl"
