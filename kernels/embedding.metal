// Embedding gather: out[t, :] = table[ids[t], :], rows of D values, 4 values a thread (the
// last thread of a row takes what is left of D). The ids are checked against the table's rows
// by the caller. Launch: grid = (ceil(D / 4), T).
#include <metal_stdlib>
using namespace metal;

kernel void embedding(device const float* table [[buffer(0)]], device const int* ids [[buffer(1)]],
                      device float* out [[buffer(2)]], constant uint& D [[buffer(3)]],
                      uint2 p [[thread_position_in_grid]]) {
    const uint i = 4 * p.x, t = p.y;
    device const float* src = table + uint(ids[t]) * D + i;
    device float* dst = out + t * D + i;
    if (i + 4 <= D) {  // packed: a row of odd D starts at any float
        *(device packed_float4*)dst = *(device const packed_float4*)src;
    } else {
        for (uint j = 0; i + j < D; j++) dst[j] = src[j];
    }
}
