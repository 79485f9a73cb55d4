// Choosing the next token from a row of logits [B, V], one threadgroup per row.
// Launch: threadgroups = B, threadgroup = a multiple of 32, at most 1024 threads.
#include "threadgroup_reduce.h"

constant uint NONE = 0xFFFFFFFFu;  // no index found

// Greedy decoding: out[b] = the index of the largest logit of row b; ties go to the lowest
// index, as numpy's argmax; NaN never wins (max ignores it). Two passes over the row, both
// reading float4 runs, neighbouring threads on neighbouring runs: the max, then the first
// index holding it (each thread stops at its first).
kernel void argmax(device const float* logits [[buffer(0)]], device int* out [[buffer(1)]],
                   constant uint& V [[buffer(2)]],
                   uint row [[threadgroup_position_in_grid]],
                   uint l [[thread_position_in_threadgroup]],
                   uint width [[threads_per_threadgroup]],
                   uint sg [[simdgroup_index_in_threadgroup]],
                   uint lane [[thread_index_in_simdgroup]],
                   uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float scratch[32];
    threadgroup uint first[32];
    device const float* x = logits + row * V;
    const uint tail = V / 4 * 4;  // then the last V % 4, one a thread
    float4 m4 = -INFINITY;
    for (uint i = 4 * l; i < tail; i += 4 * width)
        m4 = max(m4, float4(*(device const packed_float4*)(x + i)));
    float m = max(max(m4.x, m4.y), max(m4.z, m4.w));
    for (uint i = tail + l; i < V; i += width) m = max(m, x[i]);
    m = group_max(m, scratch, GroupIds{sg, lane, nsg});

    uint index = NONE;
    for (uint i = 4 * l; i < tail && index == NONE; i += 4 * width) {
        const bool4 hit = float4(*(device const packed_float4*)(x + i)) == m;
        if (any(hit)) index = i + (hit.x ? 0 : hit.y ? 1 : hit.z ? 2 : 3);
    }
    for (uint i = tail + l; i < V && index == NONE; i += width)
        if (x[i] == m) index = i;
    index = simd_min(index);
    if (lane == 0) first[sg] = index;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (l == 0) {
        for (uint i = 1; i < nsg; i++) index = min(index, first[i]);
        out[row] = index == NONE ? 0 : int(index);  // a row of NaN: 0
    }
}

// The number (count) or probability mass (mass) of the row's probabilities at or above t.
inline float at_or_above(device const float* p, uint V, float t, bool mass,
                         threadgroup float* scratch, GroupIds ids, uint l, uint width) {
    float s = 0.0f;
    for (uint i = l; i < V; i += width)
        if (p[i] >= t) s += mass ? p[i] : 1.0f;
    return group_sum(s, scratch, ids);
}

// The largest threshold t (as its bit pattern, between lo and 1.0) that keeps count or mass
// at least `need`: bisection over the bit patterns of non-negative floats, which order as the
// floats do, so about 30 passes over the row find it exactly, with no sort.
inline uint largest_threshold(device const float* p, uint V, uint lo, float need, bool mass,
                              threadgroup float* scratch, GroupIds ids, uint l, uint width) {
    uint hi = as_type<uint>(1.0f) + 1;  // nothing is above 1
    while (hi - lo > 1) {  // at_or_above(lo) >= need, at_or_above(hi) < need
        const uint mid = lo + (hi - lo) / 2;
        if (at_or_above(p, V, as_type<float>(mid), mass, scratch, ids, l, width) >= need)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

// Top-k then top-p (nucleus) sampling. probs[b, :] receives softmax(logits[b, :] /
// temperature). Kept: the tokens at least as likely as the top_k-th most likely (top_k = 0:
// all), then of those the most likely ones whose mass first reaches top_p of the kept mass
// (top_p = 1: all); ties at a threshold are all kept. Drawn: the first token, in vocabulary
// order, where the running sum of the kept probabilities passes uniforms[b] * their total
// (uniforms in [0, 1)), so the same uniforms give the same tokens.
kernel void sample_top_k_top_p(device const float* logits [[buffer(0)]],
                               device const float* uniforms [[buffer(1)]],
                               device float* probs [[buffer(2)]], device int* tokens [[buffer(3)]],
                               constant uint& V [[buffer(4)]],
                               constant float& temperature [[buffer(5)]],
                               constant uint& top_k [[buffer(6)]],
                               constant float& top_p [[buffer(7)]],
                               uint row [[threadgroup_position_in_grid]],
                               uint l [[thread_position_in_threadgroup]],
                               uint width [[threads_per_threadgroup]],
                               uint sg [[simdgroup_index_in_threadgroup]],
                               uint lane [[thread_index_in_simdgroup]],
                               uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float scratch[32];
    threadgroup float prefix[1025];
    const GroupIds ids{sg, lane, nsg};
    device const float* x = logits + row * V;
    device float* p = probs + row * V;

    float m = -INFINITY;
    for (uint i = l; i < V; i += width) m = max(m, x[i]);
    m = group_max(m, scratch, ids);
    float z = 0.0f;
    for (uint i = l; i < V; i += width) {
        p[i] = exp((x[i] - m) / temperature);
        z += p[i];
    }
    z = group_sum(z, scratch, ids);
    for (uint i = l; i < V; i += width) p[i] /= z;
    threadgroup_barrier(mem_flags::mem_device);  // the draw below reads other threads' p

    uint t = 0;  // the threshold's bits; 0 keeps every token
    if (top_k > 0 && top_k < V)
        t = largest_threshold(p, V, t, float(top_k), false, scratch, ids, l, width);
    if (top_p < 1.0f) {
        const float kept = at_or_above(p, V, as_type<float>(t), true, scratch, ids, l, width);
        t = largest_threshold(p, V, t, top_p * kept, true, scratch, ids, l, width);
    }
    const float threshold = as_type<float>(t);

    // The draw: each thread sums the kept probabilities of a contiguous chunk, thread 0 turns
    // the chunk sums into running sums (in order, so they never decrease), and the one chunk
    // whose running-sum interval holds the target walks its tokens.
    const uint chunk = (V + width - 1) / width, c0 = min(l * chunk, V), c1 = min(c0 + chunk, V);
    float s = 0.0f;
    for (uint i = c0; i < c1; i++)
        if (p[i] >= threshold) s += p[i];
    prefix[l] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (l == 0) {
        float run = 0.0f;
        for (uint i = 0; i < width; i++) {
            const float chunk_sum = prefix[i];
            prefix[i] = run;
            run += chunk_sum;
        }
        prefix[width] = run;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float total = prefix[width];
    // below the total (the float just under it: total > 0, the likeliest token being kept)
    const float target = min(uniforms[row] * total, as_type<float>(as_type<uint>(total) - 1));
    if (prefix[l] <= target && target < prefix[l + 1]) {
        float run = prefix[l];
        int token = -1;
        for (uint i = c0; i < c1 && run <= target; i++)
            if (p[i] >= threshold) {
                token = int(i);  // the last kept token if rounding leaves run short
                run += p[i];
            }
        tokens[row] = token;
    }
}
