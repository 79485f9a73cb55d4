// Softmax of each row of C values, safe against overflow: exp(x - max) / sum(exp(x - max)).
// The max and the sum come from one pass over the row (the online normaliser: each thread keeps
// a running max m and a sum s of exp(x - m), rescaled when m grows); a second pass writes.
// One threadgroup per row. Launch: threadgroups = R, threadgroup = up to 1024 threads.
#include <metal_stdlib>
using namespace metal;

// The (max, sum) pair of two parts of a row, as if it were one; an empty part is (-inf, 0).
inline float2 combine(float2 a, float2 b) {
    const float m = max(a.x, b.x);
    if (m == -INFINITY) return float2(-INFINITY, 0.0f);
    return float2(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}

kernel void softmax(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                    constant uint& C [[buffer(2)]],
                    uint row [[threadgroup_position_in_grid]],
                    uint l [[thread_position_in_threadgroup]],
                    uint width [[threads_per_threadgroup]],
                    uint sg [[simdgroup_index_in_threadgroup]],
                    uint lane [[thread_index_in_simdgroup]],
                    uint nsg [[simdgroups_per_threadgroup]]) {
    threadgroup float2 scratch[32];
    device const float* v = x + row * C;
    float2 ms = float2(-INFINITY, 0.0f);
    for (uint i = l; i < C; i += width) {  // one exp per value: rescale only on a new max
        const float xi = v[i];
        if (xi > ms.x) {
            ms = float2(xi, ms.y * exp(ms.x - xi) + 1.0f);
        } else if (xi != -INFINITY) {
            ms.y += exp(xi - ms.x);
        }
    }
    for (ushort offset = 16; offset > 0; offset /= 2)
        ms = combine(ms, simd_shuffle_xor(ms, offset));
    if (lane == 0) scratch[sg] = ms;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    ms = scratch[0];
    for (uint i = 1; i < nsg; i++) ms = combine(ms, scratch[i]);
    for (uint i = l; i < C; i += width) out[row * C + i] = exp(v[i] - ms.x) / ms.y;
}
