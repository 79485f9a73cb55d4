// Matrix-vector products for decode: y[b, n] = dot(W[n, :], x[b, :]) for a batch of B
// vectors, with W[N, K] stored as a linear layer stores its weights.
#include <metal_stdlib>
using namespace metal;

// Row w against NV vectors x[j * K ...], 8 floats a step in two float4 accumulators per
// vector; the results go to y[j * N]. NV is a template parameter so that the accumulators stay
// in registers. Each output is summed in the same order whatever NV, so a sequence's numbers
// do not depend on its batch.
template <uint NV>
inline void row_times_vectors(device const float* w, device const float* x, device float* y,
                              uint N, uint K) {
    float4 acc0[NV], acc1[NV];
    for (uint j = 0; j < NV; j++) acc0[j] = acc1[j] = 0.0f;
    uint k = 0;
    for (; k + 8 <= K; k += 8) {  // packed loads: a row of odd K starts at any float
        const float4 w0 = float4(*(device const packed_float4*)(w + k));
        const float4 w1 = float4(*(device const packed_float4*)(w + k + 4));
        for (uint j = 0; j < NV; j++) {
            device const float* v = x + j * K + k;
            acc0[j] += w0 * float4(*(device const packed_float4*)v);
            acc1[j] += w1 * float4(*(device const packed_float4*)(v + 4));
        }
    }
    for (uint j = 0; j < NV; j++) {
        const float4 acc = acc0[j] + acc1[j];
        float s = acc.x + acc.y + acc.z + acc.w;
        for (uint i = k; i < K; i++) s += w[i] * x[j * K + i];
        y[j * N] = s;
    }
}

// One thread per row of W and group of up to 4 vectors: decode reads every weight once per
// step, so this is bound by memory, and a batch of sequences pays for each read of a row once
// per 4. Threads of a threadgroup read neighbouring rows. (A SIMD-group per row, lanes along K
// and a simd_sum, reads memory in wider runs; a thread per row keeps the kernel barrier-free:
// a loop on the simulator.) Launch: grid = (N, ceil(B / 4)).
kernel void matvec(device const float* W [[buffer(0)]], device const float* x [[buffer(1)]],
                   device float* y [[buffer(2)]], constant uint& N [[buffer(3)]],
                   constant uint& K [[buffer(4)]], constant uint& B [[buffer(5)]],
                   uint2 p [[thread_position_in_grid]]) {
    const uint n = p.x, b0 = p.y * 4;
    if (n >= N || b0 >= B) return;
    device const float* w = W + n * K;
    device const float* v = x + b0 * K;
    device float* out = y + b0 * N + n;
    switch (min(4u, B - b0)) {
        case 1: row_times_vectors<1>(w, v, out, N, K); break;
        case 2: row_times_vectors<2>(w, v, out, N, K); break;
        case 3: row_times_vectors<3>(w, v, out, N, K); break;
        default: row_times_vectors<4>(w, v, out, N, K); break;
    }
}
