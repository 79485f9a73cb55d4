// Rotary position embedding, in place, in the llama layout of GGUF files: within each head of
// D values the adjacent pairs (x[2i], x[2i + 1]) are rotated by the angle pos * theta^(-2i/D).
// x is [T, H, D] (tokens, heads, head dimension), positions [T] the position of each token.
// One thread per pair. Launch: grid = (D / 2, H, T).
#include <metal_stdlib>
using namespace metal;

kernel void rope(device float* x [[buffer(0)]], device const int* positions [[buffer(1)]],
                 constant uint& H [[buffer(2)]], constant uint& D [[buffer(3)]],
                 constant float& theta [[buffer(4)]], uint3 p [[thread_position_in_grid]]) {
    const uint i = p.x, h = p.y, t = p.z;
    if (2 * i + 1 >= D) return;
    // precise: angles reach the context length in radians, where fast math's sin/cos drift
    const float freq = precise::pow(theta, -float(2 * i) / float(D));
    const float angle = float(positions[t]) * freq;
    const float c = precise::cos(angle), s = precise::sin(angle);
    device float* pair = x + (t * H + h) * D + 2 * i;
    const float x0 = pair[0], x1 = pair[1];
    pair[0] = x0 * c - x1 * s;
    pair[1] = x0 * s + x1 * c;
}
