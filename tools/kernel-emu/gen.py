# Copies the tensor-core kernel sources, the split FFMA attention and the other kernels the driver checks (compressor
# pooling, indexer top-k, the row-wise kernels) for host emulation: common.h with the platform block replaced by
# emu.h, the inline-PTX helpers (cvt.bf16x2, fma.bf16x2, mma.sync) replaced by emulated ones, and the host entry points
# (launches) cut off.
#   gen.py NATIVE_DIR OUT_DIR
import os,re,sys
src=sys.argv[1].rstrip('/')+'/src/'
out=sys.argv[2].rstrip('/')+'/'
c=open(src+'common.h').read()
# platform block -> emu
start=c.index('#if defined(__NVCC__) && !defined(__HIPCC__)')
e1=c.index('#endif\n',c.index('#error'))+len('#endif\n')
end=c.index('#endif\n',e1)+len('#endif\n')
c=c[:start]+'#include "emu.h"\n'+c[end:]
c=re.sub(r'#if defined\(__NVCC__\) && !defined\(__HIPCC__\)\n#define DS4J_HAVE_TC 1\n#else\n#define DS4J_HAVE_TC 0\n#endif','#define DS4J_HAVE_TC 1',c)
c=c.replace('#include "../include/ds4j/ds4j_gpu.h"','#include "'+src+'../include/ds4j/ds4j_gpu.h"')
open(out+'common.h','w').write(c)
open(out+'tc.h','w').write(open(src+'tc.h').read())
def repl_fn(s, sig, body):
    i=s.index(sig); j=s.index('\n}\n',i)+3
    return s[:i]+body+s[j:]
m=open(src+'tc_mma.h').read()
m=repl_fn(m,'__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {',
 'inline uint32_t pack_bf16(float lo, float hi) { return emu_to_bf16(lo) | ((uint32_t)emu_to_bf16(hi) << 16); }\n')
m=repl_fn(m,'__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {',
 'inline uint32_t mul_bf16x2(uint32_t a, uint32_t b) { return emu_mul_bf16x2(a, b); }\n')
m=repl_fn(m,'__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {',
 'inline void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { emu_mma(d, a, b0, b1, true); }\n')
m=repl_fn(m,'__device__ __forceinline__ void mma_f16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {',
 'inline void mma_f16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { emu_mma(d, a, b0, b1, false); }\n')
m=repl_fn(m,'__device__ __forceinline__ void ldsm_x4(uint32_t* r, const uint32_t* p) {',
 'inline void ldsm_x4(uint32_t* r, const uint32_t* p) { emu_ldsm_x4(r, p); }\n')
# cvt.rn.f16x2.e4m3x2: each byte's value (common.h, e4m3) as F16, which is exact
m=repl_fn(m,'__device__ __forceinline__ void e4m3x4_to_f16(uint32_t u, uint32_t& lo, uint32_t& hi) {',
 'inline void e4m3x4_to_f16(uint32_t u, uint32_t& lo, uint32_t& hi) {\n'
 '    const __half2 l = __floats2half2_rn(e4m3(u & 0xffu), e4m3((u >> 8) & 0xffu));\n'
 '    const __half2 h = __floats2half2_rn(e4m3((u >> 16) & 0xffu), e4m3(u >> 24));\n'
 '    memcpy(&lo, &l, 4);\n    memcpy(&hi, &h, 4);\n}\n')
open(out+'tc_mma.h','w').write(m)
def gemm(g, ns):
    g=repl_fn(g,'bool tc_device(ds4j_ctx* ctx) {','')
    # the PTX helpers: in tc_mma.h for the current kernel, in the file itself for the previous one
    for sig, body in [
        ('__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {',
         'inline uint32_t pack_bf16(float lo, float hi) { return emu_to_bf16(lo) | ((uint32_t)emu_to_bf16(hi) << 16); }\n'),
        ('__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {',
         'inline void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) { emu_mma(d, a, b0, b1, true); }\n'),
        ('__device__ __forceinline__ void ldsm_x4(uint32_t* r, const uint32_t* p) {',
         'inline void ldsm_x4(uint32_t* r, const uint32_t* p) { emu_ldsm_x4(r, p); }\n'),
        # cp.async copies land at the wait (cp.async.wait_all), not when issued, so that a read of a stage before
        # its wait sees the stage's old contents and fails the comparison
        ('__device__ __forceinline__ void cp_async16(uint32_t* smem, const void* gmem) {',
         'inline thread_local std::vector<std::pair<void*, const void*>> emu_cp_pending;\n'
         'inline void cp_async16(uint32_t* smem, const void* gmem) { emu_cp_pending.push_back({smem, gmem}); }\n')]:
        if sig in g:
            g=repl_fn(g,sig,body)
    g=g.replace('extern __shared__ __align__(16) uint32_t tc_gsm[];','uint32_t* tc_gsm = emu_dyn_smem;')
    g=g.replace('__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }',
                'inline void cp_async_wait_all() {\n'
                '    for (auto& c : emu_cp_pending) memcpy(c.first, c.second, 16);\n'
                '    emu_cp_pending.clear();\n'
                '}')
    if '/** Streaming multiprocessors' in g:  # host launch helpers
        g=g[:g.index('/** Streaming multiprocessors')]+g[g.index('}  // namespace tc\n#endif'):]
    g=g[:g.index('bool tc_matmul(')]+'}  // namespace ds4j\n'
    return g.replace('namespace tc {','namespace '+ns+' {')
open(out+'gemm_tc.cpp','w').write(gemm(open(src+'gemm_tc.cpp').read(),'tc'))
# the previous tensor-core GEMM (kept verbatim next to this script): the new one must give the same bits
open(out+'gemm_tc_v1.cpp','w').write(gemm(open(os.path.join(os.path.dirname(os.path.abspath(__file__)),'gemm_tc_v1.cpp')).read(),'tc1'))
# the skinny products (decode, verify): kernels only, the host entry points cut off
k=open(src+'gemm_skinny.cpp').read()
k=k[:k.index('// ------------------------------------------------------------------------------------------- host entry points')]+'}  // namespace ds4j\n'
k=k.replace('extern __shared__ __align__(128) uint4 sk_xs[];','uint4* sk_xs = reinterpret_cast<uint4*>(emu_dyn_smem);')
# the warpgroup MMAs (tc_wgmma.h): not emulated; their kernels are instantiated only by the host entry points cut off
# above, so the header's device-only parts (compiled out without sm_90a) are all the emulation sees
open(out+'tc_wgmma.h','w').write(open(src+'tc_wgmma.h').read())
# the staging's cp.async copies land at the wait, as in the prefill GEMM above (src null: 16 zero bytes)
k=repl_fn(k,'__device__ __forceinline__ void sk_cp16(uint4* smem, const float* src, const float* any) {',
 'inline thread_local std::vector<std::pair<void*, const void*>> emu_sk_pending;\n'
 'inline void sk_cp16(uint4* smem, const float* src, const float*) { emu_sk_pending.push_back({smem, src}); }\n')
k=k.replace('__device__ __forceinline__ void sk_cp_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }',
 'inline void sk_cp_wait() {\n'
 '    for (auto& c : emu_sk_pending) c.second ? (void)memcpy(c.first, c.second, 16) : (void)memset(c.first, 0, 16);\n'
 '    emu_sk_pending.clear();\n'
 '}')
open(out+'gemm_skinny.cpp','w').write(k)
x=open(src+'indexer_tc.cpp').read()
x=x.replace('extern __shared__ __align__(16) uint32_t sm[];','uint32_t* sm = emu_dyn_smem;')
x=x[:x.index('}  // namespace ds4j\n\nusing namespace ds4j;')]+'}  // namespace ds4j\n'
open(out+'indexer_tc.cpp','w').write(x)

# ops.h, the helpers several op families share, less its host part (views and scratch: runtime calls emu.h lacks)
o=open(src+'ops.h').read()
o=o[:o.index('// ------------------------------------------------------------------------------------------- host: views and scratch')]+\
  o[o.index('// ------------------------------------------------------------------------------------------- row-wise kernels'):]
open(out+'ops.h','w').write(o)
def body(f, end='}  // namespace ds4j\n\nusing namespace ds4j;'):
    """The kernels of a family's source: what its namespace ds4j holds before end."""
    t=open(src+f).read()
    return t[t.index('namespace ds4j {\n')+len('namespace ds4j {\n'):t.index(end)]

# the F16-operand attention kernel (tensor cores) of attention.cpp: the key-set helpers, the kernel and its combine
a=open(src+'attention.cpp').read()
keys=a[a.index('/** The key set of one query (spec 3.7)'):a.index('/**\n * Rows of the key set of query t')]
rows=a[a.index('__host__ __device__ __forceinline__ int64_t attended_rows'):]
keys+=rows[:rows.index('\n}\n')+3]
tcs=a[a.index('/** 2 + 2 F16 halves of a 32-bit word'):a.index('// mma.sync m16n8k16 and cp.async')]
kern=a[a.index('constexpr int TC_THREADS'):a.index('#endif  // DS4J_HAVE_MMA')]
comb=a[a.index('/**\n * Adds the nsplit (> 1) key ranges of partial row'):a.index('/** Grants a kernel more than the default 48 KB')]
emu_tc='''inline void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    const uint32_t a[4] = {a0, a1, a2, a3};
    emu_mma(c, a, b0, b1, false);
}
inline void cp_async16(void* smem, const void* gmem) { memcpy(smem, gmem, 16); }
inline void cp_async_wait_all() {}
'''
kern=kern.replace('extern __shared__ __align__(16) unsigned char tc_sm[];','unsigned char* tc_sm = reinterpret_cast<unsigned char*>(emu_dyn_smem);')
# the split FFMA attention (decode / verify / batched sequences) of attention.cpp
split=a[a.index('// ------------------------------------------------------------------------------------------- split FFMA attention'):a.index('// ------------------------------------------------------------------------------------------- end of split attention')]
split=split.replace('extern __shared__ __align__(16) float at_sm[];','float* at_sm = reinterpret_cast<float*>(emu_dyn_smem);')
split=split.replace('static inline int64_t at_smem','inline int64_t at_smem')
att=a[a.index('constexpr int ATT_THREADS'):]
att=att[:att.index('\n')+1]
# the control's conversion for several sequences (ds4j_f16_to_f32_seqs of kv_cache.cpp), which feeds the split kernels
# on F32 copies
kv=open(src+'kv_cache.cpp').read()
conv=kv[kv.index('/**\n * ds4j_f16_to_f32_seqs: grid'):kv.index('}  // namespace ds4j\n\nusing namespace ds4j;')]
open(out+'attention_tc.cpp','w').write('#include "ops.h"\nnamespace ds4j {\n'+keys+tcs+emu_tc+kern+comb+att+split+conv+'}  // namespace ds4j\n')

# the compressor pooling of compressor.cpp (compress_pool_kernel and what it needs)
c=open(src+'compressor.cpp').read()
cp=c[c.index('/**\n * The compressor rows (values a or logits z)'):c.index('/** Windows completed by a step of S positions after N0. */')]
cp=cp.replace('extern __shared__ float pool_sm[];','float* pool_sm = reinterpret_cast<float*>(emu_dyn_smem);')
cp=cp.replace('static size_t pool_smem','inline size_t pool_smem')
open(out+'compress.cpp','w').write('#include "ops.h"\nnamespace ds4j {\n'+cp+'}  // namespace ds4j\n')

# the Lightning Indexer's top-k of indexer.cpp: one block per row (topk_body) and the multi-block kernels
x=open(src+'indexer.cpp').read()
tk=x[x.index('/** Order-preserving key'):x.index('/** Checks and launches indexer_scores_kernel<T>. */')]
open(out+'topk.cpp','w').write('#include "ops.h"\nnamespace ds4j {\n'+tk+'}  // namespace ds4j\n')
# the row-wise kernels of norm.cpp, mhc.cpp (less its DS4J_HC_SPLIT switch, host code), moe_routing.cpp and
# swiglu.cpp (RMSNorm, mHC, routing; one-block and split forms): kernels only
rw=body('norm.cpp')+body('mhc.cpp','/** The split mHC kernels on (1) or the one-block ones (0)')+body('moe_routing.cpp')+body('swiglu.cpp')
rw=rw.replace('extern __shared__ float sm[];','float* sm = reinterpret_cast<float*>(emu_dyn_smem);')
rw=rw.replace('extern __shared__ __align__(16) float gsm[];','float* gsm = reinterpret_cast<float*>(emu_dyn_smem);')
open(out+'rowwise.cpp','w').write('#include "ops.h"\nnamespace ds4j {\n'+rw+'}  // namespace ds4j\n')
