/* sm90.cuh - Hopper (sm_90a) building blocks for hand-written kernels: thin, documented wrappers
 * over PTX, with no CUDA or system header (NVRTC here has none). The Makefile turns this file into
 * the C string cuda_prelude_sm90 ($(GEN)/cuda_prelude.c); codegen/gemm_sm90.cuh builds on it.
 *
 * Conventions: shared-memory addresses are 32-bit offsets in the shared window (smem_u32), the
 * form every shared::cta PTX operand takes. mbarriers are 8-byte words in shared memory. All
 * wrappers are asm volatile with a "memory" clobber where they order memory, so the compiler
 * neither drops nor moves them across other memory accesses. */

namespace moec {
namespace sm90 {

/* A CUDA tensor map (CUtensorMap: 128 opaque bytes, made on the host by cuTensorMapEncodeTiled).
 * Pass it to a kernel by value as `const __grid_constant__ TmaDesc`, so it stays in parameter
 * space and its generic address can be given to the TMA unit. */
struct alignas(128) TmaDesc {
    unsigned long long opaque[16];
};

/* ---------------------------------------------------------- addresses */
__device__ __forceinline__ unsigned smem_u32(const void *p)
{
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned)a;
}

/* ---------------------------------------------------------- warps */
/* 1 in exactly one active lane of the calling warp (elect.sync over the full mask). */
__device__ __forceinline__ int elect_one()
{
    unsigned pred;
    asm volatile("{\n.reg .b32 r;\n.reg .pred p;\nelect.sync r|p, 0xffffffff;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(pred));
    return (int)pred;
}

/* Register reallocation between warpgroups (sm_90a). Every warp of a warpgroup executes the same
 * one; takes effect only in a kernel with a register cap at entry (__launch_bounds__(T, 1)). */
template <int N> __device__ __forceinline__ void setmaxnreg_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* ---------------------------------------------------------- mbarrier
 * A barrier completes a phase when its pending arrival count reaches zero and its pending
 * transaction bytes (expect_tx, decremented by TMA's complete_tx) reach zero; the phase parity
 * then flips. try_wait(parity) returns once the phase with that parity has completed: waiting
 * for parity 1 on a fresh barrier (in phase 0) returns at once. */
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* makes barrier initialisation visible to the async proxy (TMA) and the other threads; follow with
 * __syncthreads() */
__device__ __forceinline__ void mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
/* arrives once and adds `bytes` to the transaction count the phase waits for */
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ int mbar_try_wait(unsigned bar, unsigned parity)
{
    unsigned ok;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return (int)ok;
}
/* spins until the phase of the given parity has completed (try_wait itself suspends the thread
 * for a while, so the loop does not hammer shared memory) */
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
    while (!mbar_try_wait(bar, parity)) {
    }
}

/* ---------------------------------------------------------- TMA (bulk tensor copy) */
/* Copies the box at (c0 = innermost coordinate, c1) of the tensor map into shared memory at dst
 * (1024-byte aligned for 128-byte swizzle) and completes `bytes` of transaction on bar. One thread
 * issues it. */
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc *map, unsigned bar, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
                 "[%2];\n" ::"r"(dst),
                 "l"((unsigned long long)map), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
}
/* ---------------------------------------------------------- thread-block clusters
 * A kernel launched with cluster dimension (C, 1, 1) runs blocks C c .. C c + C - 1 together as
 * cluster c (ranks 0 .. C - 1, on one GPC); each may read and signal the others' shared memory at the
 * same offsets as its own (the kernel's layout is the same in every block). */
__device__ __forceinline__ unsigned cluster_ctarank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* every thread of the cluster that has not exited arrives, then waits for the others (release /
 * acquire at cluster scope: barrier initialisation before, remote signals after) */
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
/* arrives once on the mbarrier at offset bar of cluster CTA `cta`'s shared memory, with the default (CTA-scope
 * release) semantics, as CUTLASS's ClusterBarrier::arrive(cta_id): what it orders are this CTA's reads of a stage
 * (wgmma, already waited for) before the peer's TMA overwrites it. `.release.cluster` made ptxas put MEMBAR.ALL.GPU,
 * ERRBAR and CGAERRBAR before every such arrival, and the kernel ran at 0.4x (decision 71). */
__device__ __forceinline__ void mbar_arrive_cta(unsigned bar, unsigned cta)
{
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
                 "r"(cta)
                 : "memory");
}
/* tma_load_2d multicast: the box lands at offset dst of every cluster CTA whose bit is set in mask,
 * each completing its bytes on the barrier at offset bar of its own shared memory */
__device__ __forceinline__ void tma_load_2d_mc(unsigned dst, const TmaDesc *map, unsigned bar, int c0, int c1,
                                               unsigned short mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
                 "l"((unsigned long long)map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
                 : "memory");
}

/* Copies shared memory at src (the box layout of the tensor map, 1024-byte aligned for 128-byte
 * swizzle) to the box at (c0, c1) of the tensor map in global memory; one thread issues it, then
 * bulk_commit closes the stores issued so far into a bulk group. Before src is written again,
 * bulk_wait_read<N> (at most N groups still reading shared memory); before the kernel ends,
 * bulk_wait<0> (all writes done). The writers of src need fence_proxy_async and a barrier first. */
__device__ __forceinline__ void tma_store_2d(const TmaDesc *map, unsigned src, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                     (unsigned long long)map),
                 "r"(src), "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait()
{
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

/* a barrier among `threads` threads (a multiple of 32) of the block on hardware barrier id (1..15;
 * __syncthreads uses 0) */
__device__ __forceinline__ void named_barrier(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/* arrives at named barrier id without waiting (the producer side of an ordering barrier: `threads`
 * counts the arriving and the waiting threads together) */
__device__ __forceinline__ void named_barrier_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* fetches the descriptor into the TMA unit's cache ahead of the first copy */
__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc *map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((unsigned long long)map) : "memory");
}

/* ---------------------------------------------------------- fences */
/* orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA, wgmma)
 * accesses; put it in each writing thread before the barrier that publishes the data */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* ---------------------------------------------------------- wgmma (warpgroup MMA, sm_90a)
 * All four warps of a warpgroup execute each of these together.
 * wgmma_fence: before the first wgmma of a batch, orders earlier register writes/reads of the
 * accumulators (and shared memory) against the asynchronous MMA.
 * wgmma_commit: closes the batch of wgmma issued since the last commit into one group.
 * wgmma_wait<N>: waits until at most N groups are still pending; the accumulators of completed
 * groups may then be read and their shared-memory operands reused. */
__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* The float acc[] register array is bound to the asm by "+f": pass it through this after
 * wgmma_wait so the compiler cannot move accumulator reads above the wait. */
template <int R> __device__ __forceinline__ void reg_fence(float (&d)[R])
{
#pragma unroll
    for (int i = 0; i < R; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* Shared-memory matrix descriptor for a K-major tile written by TMA with 128-byte swizzle: rows
 * of 64 bf16 (128 bytes), 8-row swizzle atoms of 1024 bytes stacked along M/N (stride byte offset
 * 1024; the leading byte offset is unused for swizzled K-major layouts and set to 1). addr is the
 * tile's (1024-byte aligned) shared address; the k-th 16-wide K slice of the atom starts at
 * addr + 32 k bytes, which the hardware swizzles like the TMA did (base offset 0). */
__device__ __forceinline__ unsigned long long desc_sw128(unsigned addr)
{
    unsigned long long d = (unsigned long long)((addr & 0x3FFFFu) >> 4);
    d |= 1ull << 16;                        /* leading byte offset (unused): 16 B */
    d |= (unsigned long long)(1024 >> 4) << 32; /* stride byte offset: 8 rows x 128 B */
    d |= 1ull << 62;                        /* layout: 128-byte swizzle */
    return d;
}

/* D[64 x 256] (+)= A[64 x 16] * B[256 x 16]^T: bf16 in, fp32 accumulators d[128] (the m64nNk16
 * fragment: see gemm_sm90.cuh), A and B in shared memory, 128-byte swizzled, K-major (TRANS_A/B 0,
 * desc_sw128) or MN-major (TRANS_A/B 1, desc_mn_sw128). accumulate = 0 overwrites d (the first K
 * step of a tile). */
template <int TRANS_A = 0, int TRANS_B = 0>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], unsigned long long desc_a,
                                                  unsigned long long desc_b, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
                 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
                 "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
                 "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
                 "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
                 "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_A), "n"(TRANS_B));
}

/* D[64 x 128] (+)= A[64 x 16] * B[128 x 16]^T: bf16 in, fp32 accumulators d[64] (the m64nNk16
 * fragment: see gemm_sm90.cuh), A and B K-major in shared memory, 128-byte swizzled.
 * accumulate = 0 overwrites d (the first K step of a tile). */
template <int TRANS_A = 0, int TRANS_B = 0>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], unsigned long long desc_a,
                                                  unsigned long long desc_b, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
                 "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_A), "n"(TRANS_B));
}

/* Shared-memory matrix descriptor for an MN-major tile written by TMA with 128-byte swizzle: each
 * 128-byte row holds 64 consecutive M (or N) elements of one K index; 8 rows (8 K indices) make a
 * 1024-byte swizzle atom. Stride byte offset: from one 8-K-row group to the next (1024 when the
 * rows are consecutive); leading byte offset `lbo`: from one 64-wide M/N block to the next (the
 * next TMA box). The 16-deep K slice k of a tile starts at addr + 2048 k bytes. */
__device__ __forceinline__ unsigned long long desc_mn_sw128(unsigned addr, unsigned lbo)
{
    unsigned long long d = (unsigned long long)((addr & 0x3FFFFu) >> 4);
    d |= (unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16; /* leading byte offset: the next 64 M/N */
    d |= (unsigned long long)(1024 >> 4) << 32;              /* stride byte offset: the next 8 K rows */
    d |= 1ull << 62;                                         /* layout: 128-byte swizzle */
    return d;
}

/* ---------------------------------------------------------- FP8 (e4m3) wgmma and bulk copies
 * D[64 x 128] (+)= A[64 x 32] * B[128 x 32]^T: E4M3 in, fp32 accumulators d[64] (the same m64nN
 * fragment as the bf16 instruction: see gemm_sm90.cuh), A and B in shared memory, K-major only (FP8
 * wgmma has no transpose), 128-byte swizzled: a 128-byte swizzle row holds 128 K elements, so the
 * k-th 32-deep slice starts 32 k bytes further (desc_sw128 + 2 k, as the bf16 16-deep slices).
 * accumulate = 0 overwrites d. The tensor core adds the 32 products of a row/column pair into d at
 * reduced precision (about 14 bits kept, DeepSeek-V3 s. 3.3.2): the fp8 kernels therefore start a
 * fresh d at every promotion interval and add it into fp32 accumulators themselves. */
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], unsigned long long desc_a,
                                                       unsigned long long desc_b, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
                 "}, %64, %65, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

/* Copies `bytes` (a multiple of 16) from global src to shared dst (both 16-byte aligned) and
 * completes them as transaction bytes on bar: the scale vectors of a pipeline stage, beside the
 * stage's TMA tensor loads. One thread issues it. */
__device__ __forceinline__ void bulk_load(unsigned dst, const void *src, unsigned bytes, unsigned bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"((unsigned long long)src), "r"(bytes), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ float ld_shared_f32(unsigned addr)
{
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void ld_shared_f32x2(unsigned addr, float &a, float &b)
{
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(a), "=f"(b) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ld_shared_f32x4(unsigned addr, float &a, float &b, float &c, float &d)
{
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "r"(addr) : "memory");
}
__device__ __forceinline__ unsigned ld_shared_u8(unsigned addr)
{
    unsigned v;
    asm volatile("ld.shared.u8 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ unsigned ld_shared_u32(unsigned addr)
{
    unsigned v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
/* threadIdx.x read from the special register where it is used (volatile: not kept in a register in between) */
__device__ __forceinline__ unsigned tid_fresh()
{
    unsigned t;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
    return t;
}
__device__ __forceinline__ double ld_shared_f64(unsigned addr)
{
    double v;
    asm volatile("ld.shared.f64 %0, [%1];\n" : "=d"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ void st_shared_f64(unsigned addr, double v)
{
    asm volatile("st.shared.f64 [%0], %1;\n" ::"r"(addr), "d"(v) : "memory");
}
__device__ __forceinline__ void st_shared_f32(unsigned addr, float v)
{
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}

/* ---------------------------------------------------------- conversion */
/* two fp32 -> packed bf16x2 (round to nearest even): lo in bits 0-15 (the lower address) */
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* ---- typed element access (bf16 storage between nodes, docs/decisions.md 40): a generated kernel's
 * buffer parameter is `float *` or, where the plan stores the tensor in bf16, `unsigned short *` (raw
 * bf16 bits); ld widens either to fp32 (exactly), st rounds to the parameter's type (round to nearest
 * even, as the CPU backend's bf16_round). Kernels written once over both are instantiated by the
 * parameter types codegen emits. */
__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const unsigned short *p) { return __uint_as_float((unsigned)*p << 16); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(unsigned short *p, float v)
{
    *p = (unsigned short)(pack_bf16x2(v, 0.f) & 0xffffu);
}
/* 8 consecutive elements (16-byte aligned for bf16, 32 for fp32) to fp32 */
__device__ __forceinline__ void ld8(float (&v)[8], const float *p)
{
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void ld8(float (&v)[8], const unsigned short *p)
{
    const uint4 u = *(const uint4 *)p;
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ void st_shared_u32(unsigned addr, unsigned v)
{
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
/* 8 bytes (two fp32, lo at the lower address) to shared memory at addr (8-byte aligned): the fp32
 * TMA-store epilogue's writes into its 128-byte-swizzled staging buffers */
__device__ __forceinline__ void st_shared_f32x2(unsigned addr, float lo, float hi)
{
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(lo), "f"(hi) : "memory");
}
__device__ __forceinline__ void st_global_f32x2(float *p, float a, float b)
{
    asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void st_global_u32(void *p, unsigned v)
{
    asm volatile("st.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_global_v4(void *p, unsigned a, unsigned b, unsigned c, unsigned d)
{
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

/* The 4 lanes of a quad (lane % 4 = s) each hold v[t] = element (s, t) of a 4 x 4 matrix of 32-bit
 * words; afterwards lane s holds v[t] = element (t, s): the transpose, in two exchange rounds
 * (across lane bit 1, then bit 0) of two shuffles each, with selects instead of run-time indices
 * so v stays in registers. Then lane s stores its 4 words (16 bytes) at p. */
__device__ __forceinline__ void store_quad(void *p, unsigned (&v)[4], int lane)
{
    const int b1 = (lane >> 1) & 1, b0 = lane & 1;
#pragma unroll
    for (int u = 0; u < 2; u++) { /* round 1: elements whose index bit 1 differs from the lane's */
        unsigned send = b1 ? v[u] : v[2 + u];
        unsigned got = __shfl_xor_sync(0xffffffffu, send, 2);
        if (b1)
            v[u] = got;
        else
            v[2 + u] = got;
    }
#pragma unroll
    for (int u = 0; u < 2; u++) { /* round 2: index bit 0 */
        unsigned send = b0 ? v[2 * u] : v[2 * u + 1];
        unsigned got = __shfl_xor_sync(0xffffffffu, send, 1);
        if (b0)
            v[2 * u] = got;
        else
            v[2 * u + 1] = got;
    }
    st_global_v4(p, v[0], v[1], v[2], v[3]);
}

} /* namespace sm90 */
} /* namespace moec */
