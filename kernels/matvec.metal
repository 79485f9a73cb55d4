// Matrix-vector products for decode: y[b, n] = dot(W[n, :], x[b, :]) for a batch of B
// vectors, with W[N, K] stored as a linear layer stores its weights.
#include <metal_stdlib>
using namespace metal;

// Vectors a thread serves from one read of its row: decode reads every weight once per step,
// so this is bound by memory, and a batch of sequences pays for the weights once per 4.
#define VECTORS 4

// One thread per row of W and group of up to 4 vectors: it streams the row, 8 floats a step,
// against each vector, in two float4 accumulators per vector (each output is summed in the
// same order whatever the batch, so a sequence's numbers do not depend on its batch). Threads
// of a threadgroup read neighbouring rows. (A SIMD-group per row, lanes along K and a
// simd_sum, reads memory in wider runs; a thread per row keeps the kernel barrier-free: a loop
// on the simulator.) Launch: grid = (N, ceil(B / 4)).
kernel void matvec(device const float* W [[buffer(0)]], device const float* x [[buffer(1)]],
                   device float* y [[buffer(2)]], constant uint& N [[buffer(3)]],
                   constant uint& K [[buffer(4)]], constant uint& B [[buffer(5)]],
                   uint2 p [[thread_position_in_grid]]) {
    const uint n = p.x, b0 = p.y * VECTORS;
    if (n >= N || b0 >= B) return;
    const uint nv = min(uint(VECTORS), B - b0);
    device const float* w = W + n * K;
    float4 acc0[VECTORS], acc1[VECTORS];
    for (uint j = 0; j < VECTORS; j++) acc0[j] = acc1[j] = 0.0f;
    uint k = 0;
    for (; k + 8 <= K; k += 8) {  // packed loads: a row of odd K starts at any float
        const float4 w0 = float4(*(device const packed_float4*)(w + k));
        const float4 w1 = float4(*(device const packed_float4*)(w + k + 4));
        for (uint j = 0; j < nv; j++) {
            device const float* v = x + (b0 + j) * K + k;
            acc0[j] += w0 * float4(*(device const packed_float4*)v);
            acc1[j] += w1 * float4(*(device const packed_float4*)(v + 4));
        }
    }
    for (uint j = 0; j < nv; j++) {
        device const float* v = x + (b0 + j) * K;
        const float4 acc = acc0[j] + acc1[j];
        float s = acc.x + acc.y + acc.z + acc.w;
        for (uint i = k; i < K; i++) s += w[i] * v[i];
        y[(b0 + j) * N + n] = s;
    }
}
