// Matrix-vector products on weights quantised in GGUF's block layouts: each row of K weights
// is K / 32 blocks of 32, each block one half-precision scale d and 32 small integers q, the
// weight being q * d. The weights are dequantised as they are read and the vector stays
// float32: y[b, n] = sum over blocks of d * dot(q, x[b, block]). One thread per output, as in
// matvec.metal. Launch: grid = (N, B).
#include <metal_stdlib>
using namespace metal;

// Q8_0: 34 bytes, the scale then 32 signed bytes.
struct block_q8_0 {
    half d;
    char qs[32];
};

// Q4_0: 18 bytes, the scale then 16 bytes of 4-bit values stored with 8 added: the low nibble
// of qs[j] is element j, the high nibble element j + 16.
struct block_q4_0 {
    half d;
    uchar qs[16];
};

kernel void matvec_q8_0(device const block_q8_0* W [[buffer(0)]],
                        device const float* x [[buffer(1)]], device float* y [[buffer(2)]],
                        constant uint& N [[buffer(3)]], constant uint& K [[buffer(4)]],
                        uint2 p [[thread_position_in_grid]]) {
    const uint n = p.x, b = p.y;
    if (n >= N) return;
    const uint blocks = K / 32;
    device const block_q8_0* row = W + n * blocks;
    device const float4* v = (device const float4*)(x + b * K);  // K % 32 == 0: aligned
    float s = 0.0f;
    for (uint i = 0; i < blocks; i++) {
        device const char* q = row[i].qs;
        float4 acc = 0.0f;
        for (uint j = 0; j < 32; j += 4)
            acc += float4(char4(*(device const packed_char4*)(q + j))) * v[i * 8 + j / 4];
        s += float(row[i].d) * (acc.x + acc.y + acc.z + acc.w);
    }
    y[b * N + n] = s;
}

kernel void matvec_q4_0(device const block_q4_0* W [[buffer(0)]],
                        device const float* x [[buffer(1)]], device float* y [[buffer(2)]],
                        constant uint& N [[buffer(3)]], constant uint& K [[buffer(4)]],
                        uint2 p [[thread_position_in_grid]]) {
    const uint n = p.x, b = p.y;
    if (n >= N) return;
    const uint blocks = K / 32;
    device const block_q4_0* row = W + n * blocks;
    device const float4* v = (device const float4*)(x + b * K);
    float s = 0.0f;
    for (uint i = 0; i < blocks; i++) {
        device const uchar* q = row[i].qs;
        float4 acc = 0.0f;
        for (uint j = 0; j < 16; j += 4) {
            const uchar4 packed = uchar4(*(device const packed_uchar4*)(q + j));
            acc += (float4(packed & uchar4(15)) - 8.0f) * v[i * 8 + j / 4];
            acc += (float4(packed >> uchar4(4)) - 8.0f) * v[i * 8 + 4 + j / 4];
        }
        s += float(row[i].d) * (acc.x + acc.y + acc.z + acc.w);
    }
    y[b * N + n] = s;
}
