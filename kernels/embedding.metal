// Embedding gather: out[t, :] = table[ids[t], :], rows of D values. The ids are checked against
// the table's rows by the caller. Launch: grid = (D, T).
#include <metal_stdlib>
using namespace metal;

kernel void embedding(device const float* table [[buffer(0)]], device const int* ids [[buffer(1)]],
                      device float* out [[buffer(2)]], constant uint& D [[buffer(3)]],
                      uint2 p [[thread_position_in_grid]]) {
    out[p.y * D + p.x] = table[uint(ids[p.y]) * D + p.x];
}
