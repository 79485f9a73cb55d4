// Causal self-attention over a prompt, the flash-attention way: scores are never stored. Each
// thread owns one query row of one head, walks the keys up to its own position and keeps an
// online softmax: a running max m, a running sum l of exp(score - m) and a running sum acc of
// exp(score - m) * v, all rescaled by exp(m_old - m_new) when a larger score comes; the output
// is acc / l. Grouped-query attention: query head h reads key/value head h / (Hq / Hkv).
// q, out: [T, Hq, D]; k, v: [T, Hkv, D]; D a multiple of 4, at most 128. Threads of a
// threadgroup take neighbouring queries of one head and read the same keys, from the cache.
// Launch: grid = (T, Hq).
#include <metal_stdlib>
using namespace metal;

#define MAX_HEAD_DIM 128

kernel void attention_prefill(device const float* q [[buffer(0)]],
                              device const float* k [[buffer(1)]],
                              device const float* v [[buffer(2)]], device float* out [[buffer(3)]],
                              constant uint& T [[buffer(4)]], constant uint& Hq [[buffer(5)]],
                              constant uint& Hkv [[buffer(6)]], constant uint& D [[buffer(7)]],
                              constant float& scale [[buffer(8)]],
                              uint2 p [[thread_position_in_grid]]) {
    const uint t = p.x, h = p.y, d4 = D / 4;
    if (t >= T) return;
    const uint kv_head = h / (Hq / Hkv);
    device const float4* qrow = (device const float4*)(q + (t * Hq + h) * D);
    float4 qs[MAX_HEAD_DIM / 4], acc[MAX_HEAD_DIM / 4];
    for (uint i = 0; i < d4; i++) {
        qs[i] = qrow[i] * scale;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (uint j = 0; j <= t; j++) {  // causal: keys 0..t
        device const float4* krow = (device const float4*)(k + (j * Hkv + kv_head) * D);
        device const float4* vrow = (device const float4*)(v + (j * Hkv + kv_head) * D);
        float4 dots = 0.0f;
        for (uint i = 0; i < d4; i++) dots += qs[i] * krow[i];
        const float s = dots.x + dots.y + dots.z + dots.w;
        if (s > m) {  // a new max: rescale what was summed under the old one
            const float r = exp(m - s);
            l *= r;
            for (uint i = 0; i < d4; i++) acc[i] *= r;
            m = s;
        }
        const float w = exp(s - m);
        l += w;
        for (uint i = 0; i < d4; i++) acc[i] += w * vrow[i];
    }
    device float4* orow = (device float4*)(out + (t * Hq + h) * D);
    for (uint i = 0; i < d4; i++) orow[i] = acc[i] / l;
}
