// Matrix-vector products for decode: y[b, n] = dot(W[n, :], x[b, :]) for a batch of B
// vectors, with W[N, K] stored as a linear layer stores its weights.
#include <metal_stdlib>
using namespace metal;

// One thread per output: it streams one row of W against one vector, 8 floats a step in two
// float4 accumulators. Decode reads every weight once per token, so this is bound by memory;
// threads of a threadgroup read neighbouring rows, and the B vectors of a batch read the same
// row, from the cache. (A SIMD-group per row, lanes along K and a simd_sum, reads memory in
// wider runs; one thread per row keeps the kernel barrier-free: a loop on the simulator.)
// Launch: grid = (N, B).
kernel void matvec(device const float* W [[buffer(0)]], device const float* x [[buffer(1)]],
                   device float* y [[buffer(2)]], constant uint& N [[buffer(3)]],
                   constant uint& K [[buffer(4)]], uint2 p [[thread_position_in_grid]]) {
    const uint n = p.x, b = p.y;
    if (n >= N) return;
    device const float* w = W + n * K;
    device const float* v = x + b * K;
    float4 acc0 = 0.0f, acc1 = 0.0f;
    uint k = 0;
    for (; k + 8 <= K; k += 8) {  // packed loads: a row of odd K starts at any float
        acc0 += float4(*(device const packed_float4*)(w + k)) *
                float4(*(device const packed_float4*)(v + k));
        acc1 += float4(*(device const packed_float4*)(w + k + 4)) *
                float4(*(device const packed_float4*)(v + k + 4));
    }
    const float4 acc = acc0 + acc1;
    float s = acc.x + acc.y + acc.z + acc.w;
    for (; k < K; k++) s += w[k] * v[k];
    y[b * N + n] = s;
}
