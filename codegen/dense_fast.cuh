/* dense_fast.cuh - the fast (--kernels fast) dense kernels that need no sm_90a feature: plain CUDA,
 * pasted into a plan's kernels.cu only when a node uses them (codegen/cuda_dense.c skinny_linear).
 * The Makefile turns it into the C string cuda_prelude_dense_fast. */
namespace moec {
namespace fast {

/* ---- skinny dense GEMMs: a linear with few outputs (the router: N = the expert count; a small vocabulary's lm_head:
 * at most 48) and
 * its gradients, which the reference's 16 x 16 tiles run on a handful of blocks. Memory-bound: each
 * reads x (or writes dx) once, 16 bytes per thread; fp32 sums in a fixed order (warp butterflies, fixed
 * chunk partials): deterministic, a reassociation of the reference's sums. K % 128 == 0. */

/* y [ROWS, N] = x [ROWS, K] . w [N, K]^T: RW rows per warp (w's loads serve RW rows), each lane 4
 * consecutive k of every 128, then a butterfly per output. */
template <long long ROWS, int N, long long K, int RW> __device__ void skinny_linear(float *y, const float *x, const float *w)
{
    const int lane = threadIdx.x & 31, warps = blockDim.x / 32;
    for (long long r0 = ((long long)blockIdx.x * warps + threadIdx.x / 32) * RW; r0 < ROWS;
         r0 += (long long)gridDim.x * warps * RW) {
        float acc[RW][N];
#pragma unroll
        for (int i = 0; i < RW; i++)
#pragma unroll
            for (int n = 0; n < N; n++)
                acc[i][n] = 0.0f;
        for (long long k = 4 * lane; k < K; k += 128) {
            float4 xv[RW];
#pragma unroll
            for (int i = 0; i < RW; i++)
                xv[i] = r0 + i < ROWS ? *(const float4 *)(x + (r0 + i) * K + k) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int n = 0; n < N; n++) {
                const float4 wv = *(const float4 *)(w + n * K + k);
#pragma unroll
                for (int i = 0; i < RW; i++)
                    acc[i][n] += xv[i].x * wv.x + xv[i].y * wv.y + xv[i].z * wv.z + xv[i].w * wv.w;
            }
        }
#pragma unroll
        for (int i = 0; i < RW; i++)
#pragma unroll
            for (int n = 0; n < N; n++) {
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    acc[i][n] += __shfl_xor_sync(0xffffffffu, acc[i][n], o);
                if (lane == (n & 31) && r0 + i < ROWS) /* every lane holds the sum after the butterfly */
                    y[(r0 + i) * N + n] = acc[i][n];
            }
    }
}

/* dx [ROWS, K] = dy [ROWS, N] . w [N, K]: each thread 4 consecutive k (w's 4N values in registers), a
 * block's rows 64 at a time (dy through shared memory). TB threads per block (K % (4 TB) == 0);
 * grid = row chunks x K / (4 TB). */
template <long long ROWS, int N, long long K, int TB>
__device__ void skinny_linear_dx(float *dx, const float *dy, const float *w)
{
    __shared__ float sdy[64 * N];
    constexpr long long SLABS = K / (4 * TB);
    const long long k = 4 * ((long long)(blockIdx.x % SLABS) * TB + threadIdx.x);
    float4 wv[N];
#pragma unroll
    for (int n = 0; n < N; n++)
        wv[n] = *(const float4 *)(w + n * K + k);
    for (long long r0 = (long long)(blockIdx.x / SLABS) * 64; r0 < ROWS; r0 += (long long)(gridDim.x / SLABS) * 64) {
        __syncthreads();
        for (int i = threadIdx.x; i < 64 * N; i += blockDim.x)
            sdy[i] = r0 + i / N < ROWS ? dy[r0 * N + i] : 0.0f;
        __syncthreads();
        for (int i = 0; i < 64 && r0 + i < ROWS; i++) {
            float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int n = 0; n < N; n++) {
                const float d = sdy[i * N + n];
                o.x += d * wv[n].x;
                o.y += d * wv[n].y;
                o.z += d * wv[n].z;
                o.w += d * wv[n].w;
            }
            *(float4 *)(dx + (r0 + i) * K + k) = o;
        }
    }
}

/* dw [N, K] = dy [ROWS, N]^T . x [ROWS, K], step 1 of 2: block (chunk c, slab s) sums the rows
 * [c CH, (c + 1) CH) for 4 columns per thread into part [c][N][K]. TB threads per block;
 * grid = CHUNKS x K / (4 TB). */
template <long long ROWS, int N, long long K, long long CH, int TB>
__device__ void skinny_linear_dw_part(float *part, const float *dy, const float *x)
{
    __shared__ float sdy[64 * N];
    constexpr long long SLABS = K / (4 * TB);
    const long long c = blockIdx.x / SLABS, k = 4 * ((long long)(blockIdx.x % SLABS) * TB + threadIdx.x);
    float4 acc[N];
#pragma unroll
    for (int n = 0; n < N; n++)
        acc[n] = make_float4(0.f, 0.f, 0.f, 0.f);
    const long long end = (c + 1) * CH < ROWS ? (c + 1) * CH : ROWS;
    for (long long r0 = c * CH; r0 < end; r0 += 64) {
        __syncthreads();
        for (int i = threadIdx.x; i < 64 * N; i += blockDim.x)
            sdy[i] = r0 + i / N < end ? dy[r0 * N + i] : 0.0f;
        __syncthreads();
        for (int i = 0; i < 64 && r0 + i < end; i++) {
            const float4 xv = *(const float4 *)(x + (r0 + i) * K + k);
#pragma unroll
            for (int n = 0; n < N; n++) {
                const float d = sdy[i * N + n];
                acc[n].x += d * xv.x;
                acc[n].y += d * xv.y;
                acc[n].z += d * xv.z;
                acc[n].w += d * xv.w;
            }
        }
    }
#pragma unroll
    for (int n = 0; n < N; n++)
        *(float4 *)(part + (c * N + n) * K + k) = acc[n];
}

/* step 2 of 2: dw [N, K] = the sum over the CHUNKS partials, in chunk order */
template <int N, long long K, long long CHUNKS> __device__ void skinny_linear_dw_sum(float *dw, const float *part)
{
    MOEC_FOR(i, N * K) {
        float s = 0.0f;
        for (long long c = 0; c < CHUNKS; c++)
            s += part[c * N * K + i];
        dw[i] = s;
    }
}

} /* namespace fast */
} /* namespace moec */
