// gpu/shaders/mm_tiles.glsl: what the tiled matmuls (mm_body.glsl: fp32
// tiles; mm_coop_body.glsl: cooperative matrix; mm_dot_body.glsl: integer
// dot) share: a tile's columns as tokens or as the listed picks of one
// expert, and main() over the tiles. Included after the
// body has declared WG, BN, ID, LCAP and TILE_ROWS (output rows a tile);
// the body defines tile() after it.
//
// Expert-indexed (ID = 1): workgroup (row tile, expert e0 + gl_WorkGroupID.y)
// lists the pairs that picked its expert (a scan of sel in windows of LCAP
// pairs, compacted through a shared counter), then runs the tiles over those
// pairs as its tokens. A pair's result never depends on which other pairs
// share its tile, so the counter's order changes no bit.
shared uint plist[(LCAP + 3u) / 4u * 4u];
shared uint pcount4[4]; // the counter in [0], 16 bytes (mm_coop_body.glsl: alignment)

// x row and y row of tile column n (false: no token there).
bool tok_rows(uint t0, uint cnt, uint n, out uint xr, out uint yr) {
    if (ID == 0u) {
        xr = t0 + n;
        yr = xr;
        return xr < p.n_tok;
    }
    if (t0 + n >= cnt)
        return false;
    const uint pair = plist[t0 + n];
    xr = p.x_per_pick != 0u ? pair : pair / p.k;
    yr = pair;
    return true;
}

// One BM x BN tile: rows r0.. of the matrices at byte wb (binding 0) and wb2
// (binding 4, GLU = 1), tile columns t0.. (tokens, or listed pairs of cnt).
void tile(uint wb, uint wb2, uint r0, uint t0, uint cnt);

// The plain form calls tile() from a loop (of one turn, or none past the
// tokens): called straight from main(), the NVIDIA driver (580.159.04)
// kept the integer-dot tile's accumulators in local memory, 4 x TM x TN
// bytes a lane for every plain tile shape and none for the expert-indexed
// form that loops (STRATA_VK_PIPE_STATS); with the loop none, and the 7B
// Q4_0's pp512 on an H100 went 3,291 -> 3,765 tok/s (bench/README.md, "H100,
// 2026-12-07 (fourth session)").
void main() {
    const uint r0 = gl_WorkGroupID.x * TILE_ROWS;
    if (ID == 0u) {
        const uint tb = gl_WorkGroupID.y * BN, te = min(tb + BN, p.n_tok);
        for (uint t0 = tb; t0 < te; t0 += BN)
            tile(p.w_base, p.w_base2, r0, t0, 0u);
        return;
    }
    const uint e = p.e0 + gl_WorkGroupID.y;
    const uint wb = p.w_base + (e - p.e0) * p.expert_bytes;
    const uint wb2 = p.w_base2 + (e - p.e0) * p.expert_bytes;
    const uint tid = gl_LocalInvocationID.x;
    for (uint base = 0u; base < p.n_pairs; base += LCAP) {
        if (tid == 0u)
            pcount4[0] = 0u;
        barrier();
        const uint nw = min(LCAP, p.n_pairs - base);
        for (uint i = tid; i < nw; i += WG)
            if (sel[base + i] == int(e))
                plist[atomicAdd(pcount4[0], 1u)] = base + i;
        barrier();
        const uint cnt = pcount4[0];
        for (uint t0 = 0u; t0 < cnt; t0 += BN)
            tile(wb, wb2, r0, t0, cnt);
        barrier(); // every lane has read pcount before the next window resets it
    }
}
