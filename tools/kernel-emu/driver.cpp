// Emulated runs of the tensor-core kernels (gemm_tc.cpp, gemm_skinny.cpp, indexer_tc.cpp, attention.cpp) against F64
// references on odd shapes: K and token tails, partial row tiles, FP8 row views inside the block grid, groups that end
// inside a tile, routed experts with uneven loads (empty experts, misaligned expert storage, more experts than one scan
// chunk), indexer blocks with rows unused, queries below K_I, several key blocks; for the skinny products (decode,
// verify) also every pass width, both m-tile variants, null experts and bit-identical results of rows computed alone;
// the split F32 attention with its decode vs verify and batched vs single bit identities; the multi-block top-k
// against a sorted reference and the one-block kernel. The prefill GEMM runs with
// each token tile (32, 64 and 128), with and without its activations split beforehand (xsplit_kernel, DS4J_TC_XSPLIT), with the deeper
// weight loads of launches of few blocks (XP 3, token tiles of 32 and 64; cp.async copies land at the wait that covers them,
// so a stage read before its wait fails), and must give,
// bit for bit, the outputs of the previous GEMM (gemm_tc_v1.cpp, checked against the references); in column parts
// (k_parts) it must give the same bits in every variant and for fewer tokens, within the references' tolerance. The
// split mHC, RMSNorm and routing kernels of mhc.cpp, norm.cpp and moe_routing.cpp must give the bits of the one-block
// kernels (mhc_cases.h). The skinny products' staged-activation kernel must give the bits of the kernel without staging. The
// compressor pooling (compressor.cpp) must give the bits of the earlier one-thread-per-channel kernel's arithmetic.
// EXTRA=1 adds the slow cases.
#include "gemm_tc.cpp"
#include "gemm_tc_v1.cpp"
#include "gemm_skinny.cpp"
#include "indexer_tc.cpp"
#include "attention_tc.cpp"
#include "topk.cpp"
#include "compress.cpp"
#include "rowwise.cpp"
#include <random>
#include <cfloat>
#include <type_traits>
#include <utility>

using namespace ds4j;

static std::mt19937_64 rng(7);
static double gauss() { static std::normal_distribution<double> n(0, 1); return n(rng); }
static int fails = 0;

/** sum_partials' launch of skinny_combine (gemm_skinny.cpp), with its choice of values per thread. */
static void combine(const float* part, int nw, int ns, int rows, float* y, int64_t ldy, const int32_t* ids,
                    void* const* wt) {
    const int64_t n = (int64_t)ns * rows;
    if (sk::combine_by_4(rows, ldy, part, y))
        emu_launch(dim3((unsigned)((n / 4 + 255) / 256)), dim3(256), 0,
                   [&] { sk::skinny_combine<4>(part, nw, ns, rows, y, ldy, ids, wt); });
    else
        emu_launch(dim3((unsigned)((n + 255) / 256)), dim3(256), 0,
                   [&] { sk::skinny_combine<1>(part, nw, ns, rows, y, ldy, ids, wt); });
}
// x of the skinny cases (fill_x): gauss(), or with wide_x each row times 2^u (u uniform in [-30, 30]) and each value
// times 2^v (v uniform in [-8, 8]): rows past the F16 range and far below it, values of one row over ~16 binades (the
// FP8 path's per-group scaling, fp8_x)
static bool wide_x = false;
static double x_scale = 1;      // FP8_EDGE: every x times this (rows far below the F16 range, F32 subnormals)
static int fixed_fp8_scale = -1;  // FP8_EDGE: every FP8 block scale byte this value (>= 0)
// TC_EDGE: FP8 and FP4 scale bytes drawn from these (both sides of the prefill GEMM's fast decoding range, subnormal
// products, F32 overflow, the NaN scale 0xFF); the prefill cases then check only the bits against the previous GEMM
static bool edge_scales = false;
static const uint8_t EDGE_SCALES[] = {0, 1, 2, 3, 9, 10, 11, 100, 127, 128, 129, 133, 134, 135, 136, 200, 253, 254, 255};
static uint8_t edge_scale() {  // each in turn, so that a matrix of 19 scale blocks or more holds every one
    static size_t i = 0;
    return EDGE_SCALES[i++ % sizeof EDGE_SCALES];
}
static void fill_x(float* xp, int64_t ldx, int64_t rows) {
    std::uniform_real_distribution<double> u(-1, 1);
    for (int64_t r = 0; r < rows; r++) {
        const double rs = (wide_x ? std::exp2(30 * u(rng)) : 1) * x_scale;
        for (int64_t c = 0; c < ldx; c++) xp[r * ldx + c] = (float)(wide_x ? gauss() * rs * std::exp2(8 * u(rng)) : gauss() * rs);
    }
}
/** SKINNY_FMT=N: the skinny cases of weight format N only (unset: every format). */
static bool fmt_on(int fmt) {
    const char* e = getenv("SKINNY_FMT");
    return !e || atoi(e) == fmt;
}

struct Mat {
    int fmt, rows, cols, scale_kind = DS4J_SCALE_E8M0;
    std::vector<uint8_t> data, scale;
    int srows;
};

static bool tight_mats = false;  // LEAN_ONLY: no padding past a matrix's bytes (AddressSanitizer sees overreads)
static Mat random_mat(int fmt, int rows, int cols) {
    Mat m;
    m.fmt = fmt; m.rows = rows; m.cols = cols;
    int64_t rb = row_bytes_of(fmt, cols);
    m.data.resize(rb * rows + (tight_mats ? 0 : 64));
    for (int64_t i = 0; i < rb * rows; i++) m.data[i] = rng() & 255;
    if (fmt == DS4J_FMT_BF16 || fmt == DS4J_FMT_F16) {
        for (int64_t i = 0; i < (int64_t)rows * cols; i++) {
            float v = (float)gauss();
            uint16_t h;
            if (fmt == DS4J_FMT_BF16) h = __float_as_uint(v) >> 16;
            else h = __float2half_rn(v).b;
            memcpy(&m.data[2 * i], &h, 2);
        }
    }
    if (fmt == DS4J_FMT_FP8_E4M3_B128) {
        for (int64_t i = 0; i < rb * rows; i++) if ((m.data[i] & 0x7f) == 0x7f) m.data[i] &= 0xfe;
        m.srows = (rows + 127) / 128;
        m.scale.resize(m.srows * ((cols + 127) / 128));
        for (auto& s : m.scale) s = edge_scales ? edge_scale() : 120 + rng() % 6;
        if (fixed_fp8_scale >= 0) for (auto& s : m.scale) s = (uint8_t)fixed_fp8_scale;
    }
    if (fmt == DS4J_FMT_FP4_E2M1_B32) {
        m.scale.resize((size_t)rows * cols / 32);
        for (auto& s : m.scale) s = edge_scales ? edge_scale() : 122 + rng() % 6;
    }
    return m;
}

static WView view(const Mat& m, int row_from) {
    WView v;
    int64_t rb = row_bytes_of(m.fmt, m.cols);
    v.w = m.data.data() + rb * row_from;
    v.scale = m.scale.empty() ? nullptr
            : m.fmt == DS4J_FMT_FP4_E2M1_B32 ? m.scale.data() + (size_t)row_from * (m.cols / 32) : m.scale.data();
    v.scale_kind = m.scale_kind;
    v.row_base = m.fmt == DS4J_FMT_FP8_E4M3_B128 ? row_from : 0;
    v.cols = m.cols;
    v.scale_cols = (m.cols + 127) / 128;
    return v;
}

static double wref(const WView& v, int fmt, int r, int c) {
    switch (fmt) {
        case DS4J_FMT_F16: return wget<DS4J_FMT_F16>(v, r, c);
        case DS4J_FMT_BF16: return wget<DS4J_FMT_BF16>(v, r, c);
        case DS4J_FMT_FP8_E4M3_B128: return wget<DS4J_FMT_FP8_E4M3_B128>(v, r, c);
        default: return wget<DS4J_FMT_FP4_E2M1_B32>(v, r, c);
    }
}

// tc1: the previous tensor-core GEMM (gemm_tc_v1.cpp, BK 32, token tiles of 64), the reference for bit identity
template <bool MOE>
static void launch_gemm_v1(int fmt, dim3 grid, const tc1::Args& a) {
    switch (fmt) {
        case DS4J_FMT_F16: emu_launch(grid, dim3(256), 0, [&] { tc1::gemm_kernel<DS4J_FMT_F16, MOE>(a); }); break;
        case DS4J_FMT_BF16: emu_launch(grid, dim3(256), 0, [&] { tc1::gemm_kernel<DS4J_FMT_BF16, MOE>(a); }); break;
        case DS4J_FMT_FP8_E4M3_B128: emu_launch(grid, dim3(256), 0, [&] { tc1::gemm_kernel<DS4J_FMT_FP8_E4M3_B128, MOE>(a); }); break;
        default: emu_launch(grid, dim3(256), 0, [&] { tc1::gemm_kernel<DS4J_FMT_FP4_E2M1_B32, MOE>(a); }); break;
    }
}

/** Whether launch_gemm_fb runs the XP 3 kernel (deeper weight loads, launches of few blocks) where it exists. */
static bool g_deep = false;

template <int F, bool MOE, int BN>
static void launch_gemm_fb(dim3 grid, const tc::Args& a) {
    if (a.xs && BN <= 64 && g_deep)
        emu_launch(grid, dim3(tc::THREADS), tc::Stage<F, BN>::BYTES, [&] { tc::gemm_kernel<F, MOE, BN, 3>(a); });
    else if (a.xs) emu_launch(grid, dim3(tc::THREADS), tc::Stage<F, BN>::BYTES, [&] { tc::gemm_kernel<F, MOE, BN, 1>(a); });
    else emu_launch(grid, dim3(tc::THREADS), tc::Stage<F, BN>::BYTES, [&] { tc::gemm_kernel<F, MOE, BN, 0>(a); });
}

/**
 * The current GEMM with token tiles of bn (32, 64 or 128), the same Args as the previous one; with xp the activations
 * are split beforehand (xsplit_kernel, the DS4J_TC_XSPLIT path): nrows rows (dense groups x S, moe the rows of x)
 * of cols columns, group stride xgs; extra: the column parts' fields (kparts, part) when not null.
 */
template <bool MOE>
static void launch_gemm(int fmt, int bn, dim3 grid, const tc1::Args& a1, bool xp = false, int64_t nrows = 0,
                        int cols = 0, int64_t xgs = 0, int S = 0, const tc::Args* extra = nullptr) {
    static_assert(sizeof(tc::Args) > sizeof(tc1::Args), "the previous argument block, then the XP fields");
    tc::Args a{};
    memcpy(&a, &a1, sizeof a1);
    if (extra) {  // the column parts
        a.kparts = extra->kparts;
        a.part = extra->part;
    }
    std::vector<uint16_t> xs;
    if (xp) {
        // a ragged row pitch (cols + 8) checks that the kernel uses xs_ld, not cols
        const int64_t lds = cols + 8;
        xs.assign((size_t)(2 * nrows * lds), 0xdead);
        const int64_t chunks = nrows * (cols / 8);
        emu_launch(dim3((unsigned)((chunks + 63) / 64)), dim3(64), 0,
                   [&] { tc::xsplit_kernel(a.x, a.ldx, xgs, S, nrows, cols, lds, xs.data(), nrows * lds); });
        a.xs = xs.data();
        a.xs_ld = lds;
        a.xs_plane = nrows * lds;
    }
#define TC_FB(F) (bn == 128 ? launch_gemm_fb<F, MOE, 128>(grid, a) : bn == 64 ? launch_gemm_fb<F, MOE, 64>(grid, a) \
                                                                   : launch_gemm_fb<F, MOE, 32>(grid, a))
    switch (fmt) {
        case DS4J_FMT_F16: TC_FB(DS4J_FMT_F16); break;
        case DS4J_FMT_BF16: TC_FB(DS4J_FMT_BF16); break;
        case DS4J_FMT_FP8_E4M3_B128: TC_FB(DS4J_FMT_FP8_E4M3_B128); break;
        default: TC_FB(DS4J_FMT_FP4_E2M1_B32); break;
    }
#undef TC_FB
}

static int bit_diffs(const float* a, const float* b, size_t n);

/** The prefill GEMM's variants each case runs: token tile, activations split beforehand, deeper weight loads. */
struct TcVariant {
    int bn;
    bool xp, deep;
};
constexpr TcVariant TC_VARIANTS[] = {{64, false, false}, {128, false, false}, {64, true, false}, {128, true, false},
                                     {64, true, true},   {32, false, false},  {32, true, false}, {32, true, true}};
constexpr int N_TC_VARIANTS = sizeof(TC_VARIANTS) / sizeof(TC_VARIANTS[0]);

/** FNV-1a over the bit patterns of n floats: equal hashes across builds mean the same outputs, bit for bit. */
static uint64_t bits_hash(const float* a, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, a + i, 4);
        for (int b = 0; b < 4; b++) h = (h ^ ((u >> (8 * b)) & 0xffu)) * 1099511628211ull;
    }
    return h;
}

static double abs_floor = 1e-30;  // FP8_EDGE: 0 (its results lie far below 1e-30)
static void check(const char* what, double got, double want, double mag, double tol, int i, int j) {
    if (edge_scales) return;  // TC_EDGE: bits against the previous GEMM only
    if (!(std::fabs(got - want) <= tol * mag + abs_floor)) {
        if (fails < 20) printf("FAIL %s (%d, %d): got %.9g want %.9g (mag %.3g)\n", what, i, j, got, want, mag);
        fails++;
    }
}

// y[s, r] for rows [from, from+rows) with groups
static void dense(int fmt, int rows_total, int from, int rows, int cols, int grp, int S, int pad) {
    Mat m = random_mat(fmt, rows_total, cols);
    WView v = view(m, from);
    const int groups = rows / grp;
    const int64_t xgs = grp > 0 && groups > 1 ? cols + 4 : 0;
    const int64_t ldx = (groups - 1) * xgs + cols + pad, ldy = rows + 3;
    std::vector<float> x(ldx * S + 16), y(ldy * S, -777.f);
    // 16-byte aligned x
    float* xp = (float*)(((uintptr_t)x.data() + 15) & ~(uintptr_t)15);
    for (int64_t i = 0; i < ldx * S; i++) xp[i] = (float)gauss();
    tc1::Args a{};
    a.v = v; a.rows = rows; a.grp = grp; a.tiles_per_grp = (grp + 127) / 128; a.xgs = xgs;
    a.x = xp; a.ldx = ldx; a.y = y.data(); a.ldy = ldy; a.S = S;
    dim3 grid((S + 63) / 64, groups * a.tiles_per_grp);
    launch_gemm_v1<false>(fmt, grid, a);
    // the current kernel with both token tiles: the same bits as the previous one, padding included
    int diffs[N_TC_VARIANTS];
    for (int i = 0; i < N_TC_VARIANTS; i++) {
        const int bn = TC_VARIANTS[i].bn;
        const bool xp = TC_VARIANTS[i].xp;
        g_deep = TC_VARIANTS[i].deep;
        std::vector<float> y2(ldy * S, -777.f);
        a.y = y2.data();
        launch_gemm<false>(fmt, bn, dim3((S + bn - 1) / bn, groups * a.tiles_per_grp), a, xp, (int64_t)groups * S, cols,
                           groups > 1 ? xgs : 0, S);
        diffs[i] = bit_diffs(y.data(), y2.data(), y.size());
        if (diffs[i]) { printf("FAIL dense BN %d XSPLIT %d deep %d: %d values differ from the previous kernel\n", bn, xp, g_deep, diffs[i]); fails++; }
    }
    g_deep = false;
    // column parts (k_parts): kp ranges of column tiles, their partials added in order (sum_partials); every tile
    // variant, and a run of fewer tokens, must give the bits of the first run (BN 64, whole S), which must be within
    // the reference's tolerance; kp larger than the tiles leaves parts empty (zero partials)
    const int nk = (cols + tc::BK - 1) / tc::BK;
    std::vector<std::vector<float>> ykp;
    for (int kp : {3, nk + 1}) {
        if (kp == nk + 1 && (nk > 2 || kp == 3)) continue;  // nk 2: kp 3 already leaves a part empty
        std::vector<float> first;
        for (int i = 0; i <= N_TC_VARIANTS; i++) {
            // every variant, then (i == N_TC_VARIANTS) the first one with fewer tokens
            const TcVariant tv = TC_VARIANTS[i < N_TC_VARIANTS ? i : 0];
            const int bn = tv.bn, S2 = i == N_TC_VARIANTS ? std::max(1, S - 5) : S;
            const bool xp = tv.xp;
            g_deep = tv.deep;
            std::vector<float> y2(ldy * S, -777.f), part((size_t)kp * S2 * rows, -555.f);
            tc1::Args b = a;
            b.y = y2.data();
            b.S = S2;
            tc::Args extra{};
            extra.kparts = kp;
            extra.part = part.data();
            launch_gemm<false>(fmt, bn, dim3((S2 + bn - 1) / bn, groups * a.tiles_per_grp, kp), b, xp, (int64_t)groups * S2,
                               cols, groups > 1 ? xgs : 0, S2, &extra);
            combine(part.data(), kp, S2, rows, y2.data(), ldy, nullptr, nullptr);
            if (i == 0) { first = y2; continue; }
            int d = 0;
            for (int s = 0; s < S2; s++)
                for (int r = 0; r < ldy; r++) d += memcmp(&first[s * ldy + r], &y2[s * ldy + r], 4) != 0;
            if (d) { printf("FAIL dense column parts %d: BN %d XSPLIT %d deep %d S %d: %d values differ\n", kp, bn, xp, g_deep, S2, d); fails++; }
        }
        ykp.push_back(first);
    }
    g_deep = false;
    double worst = 0, worst_kp = 0;
    for (int s = 0; s < S; s++)
        for (int r = 0; r < rows; r++) {
            double acc = 0, mag = 0;
            for (int c = 0; c < cols; c++) {
                double p = wref(v, fmt, r, c) * xp[s * ldx + (r / grp) * xgs + c];
                acc += p; mag += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(y[s * ldy + r] - acc) / mag);
            check("dense", y[s * ldy + r], acc, mag, 1e-5, s, r);
            for (const auto& yk : ykp) {
                worst_kp = std::max(worst_kp, std::fabs(yk[s * ldy + r] - acc) / mag);
                check("dense column parts", yk[s * ldy + r], acc, mag, 1e-5, s, r);
            }
        }
    for (const auto& yk : ykp)
        for (int s = 0; s < S; s++) for (int r = rows; r < ldy; r++) if (yk[s * ldy + r] != -777.f) { printf("FAIL dense column parts wrote padding\n"); fails++; }
    // untouched padding
    for (int s = 0; s < S; s++) for (int r = rows; r < ldy; r++) if (y[s * ldy + r] != -777.f) { printf("FAIL dense wrote padding\n"); fails++; }
    printf("dense fmt %d rows %d (from %d) cols %d grp %d S %d: worst rel %.3g (column parts %.3g); vs previous kernel %d (BN 64) / %d (BN 128)"
           " / %d (BN 64 XSPLIT) / %d (BN 128 XSPLIT) / %d (BN 64 XSPLIT deep) / %d (BN 32) / %d (BN 32 XSPLIT) / %d (BN 32"
           " XSPLIT deep) bits differ\n",
           fmt, rows, from, cols, grp, S, worst, worst_kp, diffs[0], diffs[1], diffs[2], diffs[3], diffs[4], diffs[5], diffs[6],
           diffs[7]);
}

static void moe(int fmt, int E, int k, int S, int rows, int cols, bool per_pick, bool misalign) {
    std::vector<Mat> ms;
    std::vector<void*> wt(E), st(E);
    std::vector<std::vector<uint8_t>> shifted(E);
    for (int e = 0; e < E; e++) ms.push_back(random_mat(fmt, rows, cols));
    for (int e = 0; e < E; e++) {
        wt[e] = ms[e].data.data();
        if (misalign && e == 1) {
            shifted[e].resize(ms[e].data.size() + 8);
            memcpy(shifted[e].data() + 8, ms[e].data.data(), ms[e].data.size());
            wt[e] = shifted[e].data() + 8;  // vector data is 16-aligned: +8 is not
        }
        st[e] = ms[e].scale.empty() ? nullptr : ms[e].scale.data();
    }
    const int P = S * k;
    std::vector<int32_t> ids(P);
    // uneven: expert 1 gets most picks, the last expert none
    for (int s = 0; s < S; s++) {
        std::vector<int> pool;
        for (int e = 0; e < E - 1; e++) pool.push_back(e);
        std::shuffle(pool.begin(), pool.end(), rng);
        if (s % 5 != 4) { auto it = std::find(pool.begin(), pool.end(), 1); std::iter_swap(pool.begin(), it); }
        for (int j = 0; j < k; j++) ids[s * k + j] = pool[j];
    }
    const int xr = per_pick ? P : S;
    const int64_t ldx = cols + 4, ldy = rows + 1;
    std::vector<float> x(ldx * xr + 16), y(ldy * P, -777.f);
    float* xp = (float*)(((uintptr_t)x.data() + 15) & ~(uintptr_t)15);
    for (int64_t i = 0; i < ldx * xr; i++) xp[i] = (float)gauss();
    std::vector<int32_t> scratch(P + 3 * E + 1, -1);
    int32_t* perm = scratch.data(); int32_t* cnt = perm + P; int32_t* off = cnt + E; int32_t* tp = off + E;
    emu_launch(dim3(E), dim3(256), 0, [&] { tc::moe_group_kernel(ids.data(), P, perm, cnt, off); });
    emu_launch(dim3(1), dim3(256), 0, [&] { tc1::moe_tiles_kernel(cnt, E, tp); });
    tc1::Args a{};
    a.v.scale_kind = DS4J_SCALE_E8M0; a.v.cols = cols; a.v.scale_cols = (cols + 127) >> 7;
    a.rows = rows; a.x = xp; a.ldx = ldx; a.y = y.data(); a.ldy = ldy; a.S = S;
    a.w_table = wt.data(); a.scale_table = fmt >= DS4J_FMT_FP8_E4M3_B128 ? st.data() : nullptr; a.row_base_table = nullptr;
    a.perm = perm; a.cnt = cnt; a.off = off; a.tile_prefix = tp; a.E = E; a.k = k; a.x_per_pick = per_pick;
    const int max_tiles = P / 64 + std::min(E, P);
    launch_gemm_v1<true>(fmt, dim3(max_tiles, (rows + 127) / 128), a);
    int diffs[N_TC_VARIANTS];
    for (int i = 0; i < N_TC_VARIANTS; i++) {
        const int bn = TC_VARIANTS[i].bn;
        const bool xp = TC_VARIANTS[i].xp;
        g_deep = TC_VARIANTS[i].deep;
        std::vector<int32_t> tp2(E + 1, -1);
        emu_launch(dim3(1), dim3(256), 0, [&] { tc::moe_tiles_kernel(cnt, E, bn, tp2.data()); });
        std::vector<float> y2(ldy * P, -777.f);
        tc1::Args a2 = a;
        a2.y = y2.data();
        a2.tile_prefix = tp2.data();
        launch_gemm<true>(fmt, bn, dim3(P / bn + std::min(E, P), (rows + 127) / 128), a2, xp, xr, cols, 0, xr);
        diffs[i] = bit_diffs(y.data(), y2.data(), y.size());
        if (diffs[i]) { printf("FAIL moe BN %d XSPLIT %d deep %d: %d values differ from the previous kernel\n", bn, xp, g_deep, diffs[i]); fails++; }
    }
    g_deep = false;
    // counting sort sanity
    int tot = 0;
    for (int e = 0; e < E; e++) tot += cnt[e];
    if (tot != P) { printf("FAIL moe counts %d != %d\n", tot, P); fails++; }
    double worst = 0;
    for (int p = 0; p < P; p++) {
        WView v = view(ms[ids[p]], 0);
        for (int r = 0; r < rows; r++) {
            double acc = 0, mag = 0;
            for (int c = 0; c < cols; c++) {
                double pr = wref(v, fmt, r, c) * xp[(per_pick ? p : p / k) * ldx + c];
                acc += pr; mag += std::fabs(pr);
            }
            worst = std::max(worst, std::fabs(y[p * ldy + r] - acc) / mag);
            check("moe", y[p * ldy + r], acc, mag, 1e-5, p, r);
        }
    }
    printf("moe fmt %d E %d k %d S %d rows %d cols %d per_pick %d misalign %d: worst rel %.3g; vs previous kernel %d / %d"
           " (XSPLIT %d / %d, deep %d; BN 32 %d, XSPLIT %d, deep %d) bits differ; tiles %d; counts", fmt, E, k, S, rows, cols,
           per_pick, misalign, worst, diffs[0], diffs[1], diffs[2], diffs[3], diffs[4], diffs[5], diffs[6], diffs[7], tp[E]);
    for (int e = 0; e < E; e++) printf(" %d", cnt[e]);
    printf("\n");
}

static int idx_qmode = 0;  // EDGES_ONLY: 1 finite edge rows (F64 check on), 2 also FLT_MAX / inf / NaN (bits only)
static void indexer(int HI, int dI, int64_t N0, int S, int m, int K) {
    const int64_t maxAvail = (N0 + S) / m;
    std::vector<float> qi((size_t)S * HI * dI + 16), wt((size_t)S * HI);
    float* q = (float*)(((uintptr_t)qi.data() + 15) & ~(uintptr_t)15);
    for (size_t i = 0; i < (size_t)S * HI * dI; i++) q[i] = (float)(gauss() * (i % 7 == 0 ? 30 : 1)) * (i / dI % 5 == 3 ? 1e-3f : 1.f);
    if (idx_qmode) {  // EDGES_ONLY: adversarial query rows (row = s * HI + h)
        std::uniform_int_distribution<uint32_t> ub(1, 0x7fffffu);
        for (size_t rr = 0; rr < (size_t)S * HI; rr++) {
            const int kind = idx_qmode == 1 ? (int)((rr * 7 + rr / 16) % 5) : (int)((rr * 5 + rr / 16) % 9);
            float* row = q + rr * dI;
            for (int i = 0; i < dI; i++) {
                float v = row[i];
                switch (kind) {
                    case 0: break;
                    case 1: v = 0.f; break;                                             // zero row
                    case 2: { uint32_t u = ub(rng) | (rng() & 1 ? 0x80000000u : 0); memcpy(&v, &u, 4); break; }  // subnormal only
                    case 3: v = (float)(gauss() * 1e20); break;                          // large, finite products
                    case 4: v = i == dI / 2 ? (float)(gauss() * 1e-3) : (i % 3 ? 0.f : -0.f); break;  // one value, +-0 elsewhere
                    case 5: v = (float)(std::ldexp(1.0, 127) * (1.99 * (rng() % 1000) / 1000.0)) * (rng() & 1 ? -1.f : 1.f); break;  // near FLT_MAX
                    case 6: if (i == (int)(rr % dI)) v = rng() & 1 ? INFINITY : -INFINITY; break;  // an inf
                    case 7: if (i == (int)((rr * 3) % dI)) v = NAN; break;                         // a NaN
                    default: v = i == 0 ? 3.402823466e38f : (float)(gauss() * 1e-30); break;        // FLT_MAX beside tiny values
                }
                row[i] = v;
            }
        }
    }
    for (auto& w : wt) w = (float)gauss();
    std::vector<uint16_t> keys(maxAvail * dI + 8);
    uint16_t* kp = (uint16_t*)(((uintptr_t)keys.data() + 15) & ~(uintptr_t)15);
    for (int64_t i = 0; i < maxAvail * dI; i++) kp[i] = __float2half_rn((float)gauss()).b;
    const int64_t ld = maxAvail + 3;
    std::vector<float> sc(S * ld, -555.f);
    float w_scale = 1.f / std::sqrt((float)HI), s_scale = 1.f / std::sqrt((float)dI);
    const int qpb = 128 / HI;
    dim3 grid((maxAvail + 511) / 512, (S + qpb - 1) / qpb);
    emu_launch(grid, dim3(256), itc::smem_bytes(128, dI), [&] {
        itc::indexer_tc_kernel<uint16_t, 128>(q, wt.data(), kp, N0, S, m, HI, dI, K, w_scale, s_scale, sc.data(), ld);
    });
    double worst = 0;
    int scored = 0;
    for (int s = 0; s < S; s++) {
        int64_t avail = (N0 + s + 1) / m;
        for (int64_t e = 0; e < ld; e++) {
            float got = sc[s * ld + e];
            if (avail <= K || e >= avail) {
                if (got != -555.f) { if (fails < 20) printf("FAIL indexer wrote s %d e %ld\n", s, (long)e); fails++; }
                continue;
            }
            scored++;
            double acc = 0, mag = 0;
            for (int h = 0; h < HI; h++) {
                double d = 0, dm = 0;
                for (int i = 0; i < dI; i++) {
                    double p = (double)q[((size_t)s * HI + h) * dI + i] * emu_f16(kp[e * dI + i]);
                    d += p; dm += std::fabs(p);
                }
                double w = (double)wt[s * HI + h] * w_scale;
                acc += w * std::max(d, 0.0) * s_scale;
                mag += std::fabs(w) * dm * s_scale;
            }
            worst = std::max(worst, std::fabs(got - acc) / (mag + 1e-30));
            if (idx_qmode != 2) check("indexer", got, acc, mag, 1e-5, s, (int)e);
        }
    }
    // the decode / verify kernel: the same bits as the prefill kernel for the whole step (both block shapes, several
    // key-range widths), one query at a time, F32 copies of the keys, and the step cut into two sequences (views)
    std::vector<float> keys32(maxAvail * dI + 8);
    float* k32 = (float*)(((uintptr_t)keys32.data() + 15) & ~(uintptr_t)15);
    for (int64_t i = 0; i < maxAvail * dI; i++) k32[i] = emu_f16(kp[i]);
    // lean: the kernels' LEAN loop (1: ldmatrix fragments, the rows of queries past the step's last not multiplied;
    // 2: that loop with one barrier a tile, two key buffers)
    auto rows_run = [&](const ds4j_seq_view* views, int nseq, bool f32, int rows, int tiles, int64_t n0, int s_cnt,
                        const float* qq, const float* ww, float* out, int lean = 0) {
        const int per = rows / HI;
        dim3 g((s_cnt + per - 1) / per, (maxAvail + 64 * tiles - 1) / (64 * tiles), nseq);
        auto run = [&](auto lean_c) {
            constexpr int L = decltype(lean_c)::value;
            if (rows == 64 && f32) itc::indexer_tc_rows_kernel<float, 64, L>(views, qq, ww, k32, n0, s_cnt, m, HI, dI, K, w_scale, s_scale, out, ld, tiles);
            else if (rows == 64) itc::indexer_tc_rows_kernel<uint16_t, 64, L>(views, qq, ww, kp, n0, s_cnt, m, HI, dI, K, w_scale, s_scale, out, ld, tiles);
            else if (f32) itc::indexer_tc_rows_kernel<float, 128, L>(views, qq, ww, k32, n0, s_cnt, m, HI, dI, K, w_scale, s_scale, out, ld, tiles);
            else itc::indexer_tc_rows_kernel<uint16_t, 128, L>(views, qq, ww, kp, n0, s_cnt, m, HI, dI, K, w_scale, s_scale, out, ld, tiles);
        };
        emu_launch(g, dim3(2 * rows), itc::smem_bytes(rows, dI, lean == 2 ? 2 : 1), [&] {
            if (lean == 2) run(std::integral_constant<int, 2>{});
            else if (lean == 1) run(std::integral_constant<int, 1>{});
            else run(std::integral_constant<int, 0>{});
        });
    };
    int same = 0;
    auto cmp = [&](const char* what, const std::vector<float>& got, int s_from, int s_cnt) {
        if (memcmp(got.data() + (size_t)s_from * ld, sc.data() + (size_t)s_from * ld, 4 * ld * s_cnt) != 0) {
            if (fails < 20) printf("FAIL indexer %s differs from the prefill kernel (rows %d..%d)\n", what, s_from, s_from + s_cnt - 1);
            fails++;
        } else same++;
    };
    const int rows_v[2] = {64, 128};
    for (int rv = 0; rv < 2; rv++) {
        if (rows_v[rv] < HI) continue;
        for (int lean : {0, 1, 2}) {
            const char* names[3][2] = {{"verify step", "on F32 keys"}, {"verify step (lean)", "on F32 keys (lean)"},
                                       {"verify step (lean, one barrier)", "on F32 keys (lean, one barrier)"}};
            for (int tiles : {1, 2, 3}) {
                std::vector<float> o(S * ld, -555.f);
                rows_run(nullptr, 1, false, rows_v[rv], tiles, N0, S, q, wt.data(), o.data(), lean);
                cmp(names[lean][0], o, 0, S);
            }
            std::vector<float> o(S * ld, -555.f);
            rows_run(nullptr, 1, true, rows_v[rv], 8, N0, S, q, wt.data(), o.data(), lean);
            cmp(names[lean][1], o, 0, S);
        }
    }
    for (int s : {0, S / 2, S - 1}) {  // one query alone: decode at position N0 + s
        std::vector<float> o(S * ld, -555.f);
        rows_run(nullptr, 1, false, HI <= 64 ? 64 : 128, 2, N0 + s, 1, q + (size_t)s * HI * dI, wt.data() + s * HI, o.data() + s * ld);
        cmp("decode", o, s, 1);
        // and in a block of 128 rows, whose second query is past the step; key ranges of 3 tiles (LEAN 1) and of 4
        // (LEAN 2: each of its two key buffers filled twice)
        for (int lean : {1, 2}) {
            std::vector<float> ol(S * ld, -555.f);
            rows_run(nullptr, 1, false, 128, lean == 1 ? 3 : 4, N0 + s, 1, q + (size_t)s * HI * dI, wt.data() + s * HI, ol.data() + s * ld, lean);
            cmp(lean == 1 ? "decode (lean)" : "decode (lean, one barrier)", ol, s, 1);
        }
    }
    if (S >= 2) {
        const int s1 = S / 2;
        ds4j_seq_view vs[2] = {{N0, s1, 0, nullptr, nullptr, kp, 0, 0}, {N0 + s1, S - s1, s1, nullptr, nullptr, kp, 0, 0}};
        std::vector<float> o(S * ld, -555.f);
        rows_run(vs, 2, false, 128, 1, 0, std::max(s1, S - s1), q, wt.data(), o.data());
        cmp("two sequences", o, 0, S);
        for (int lean : {1, 2}) {
            std::vector<float> ol(S * ld, -555.f);
            // one tile a range, and three (odd: the one-barrier loop ends on buffer 0)
            rows_run(vs, 2, false, 128, lean == 1 ? 1 : 3, 0, std::max(s1, S - s1), q, wt.data(), ol.data(), lean);
            cmp(lean == 1 ? "two sequences (lean)" : "two sequences (lean, one barrier)", ol, 0, S);
        }
    }
    printf("indexer HI %d dI %d N0 %ld S %d m %d K %d qmode %d: %d scores, worst rel %.3g; decode / verify kernel: %d runs"
           " bit-identical; hash %016llx\n", HI, dI, (long)N0, S, m, K, idx_qmode, scored, worst, same,
           (unsigned long long)bits_hash(sc.data(), sc.size()));
}

// F16-operand attention (attention.cpp, tensor cores) against an F64 reference: key sets with the window, ring wrap,
// this step's rows, HCA entries and CSA selections; heads past H; several key ranges with the combine kernel.
static void attention(int H, int D, int kind, int m, int K, int64_t N0, int S, int nsplit_want, double qstd) {
    const int W = 16, cap = W + 8;
    auto f16r = [](double v) { return __half2float(__float2half_rn((float)v)); };
    std::vector<float> q((size_t)S * H * D), kv_new((size_t)S * D), sinks(H);
    for (auto& v : q) v = (float)(gauss() * qstd);
    for (auto& v : kv_new) v = f16r(gauss());
    for (auto& v : sinks) v = (float)gauss();
    std::vector<uint16_t> ring((size_t)cap * D);
    for (auto& v : ring) v = __float2half_rn((float)gauss()).b;
    const int64_t ncomp_max = kind == DS4J_ATTN_SLIDING ? 0 : (N0 + S) / m;
    std::vector<uint16_t> entries((size_t)std::max<int64_t>(ncomp_max, 1) * D);
    for (auto& v : entries) v = __float2half_rn((float)gauss()).b;
    std::vector<int32_t> sel((size_t)S * K);
    for (int s = 0; s < S; s++) {
        const int64_t avail = (N0 + s + 1) / std::max(m, 1);
        std::vector<int32_t> all(avail);
        for (int64_t e = 0; e < avail; e++) all[e] = (int32_t)e;
        std::shuffle(all.begin(), all.end(), rng);
        for (int i = 0; i < K && i < (int)avail; i++) sel[(size_t)s * K + i] = all[i];
    }
    const float scale = 1.f / std::sqrt((float)D);
    int64_t nk_max = 0;
    for (int s = 0; s < S; s++) nk_max = std::max<int64_t>(nk_max, attended_rows(kind, m, K, N0 + s, W));
    int nsplit = 1;  // the grid's ranges: the most any query gets (each query's own split: tc_split)
    for (int s = 0; s < S; s++) nsplit = std::max(nsplit, tc_split(attended_rows(kind, m, K, N0 + s, W), nsplit_want).nsplit);
    const int per = tc_split(nk_max, nsplit_want).per;
    const int HB = (H + TC_ROWS - 1) / TC_ROWS;
    std::vector<float> out((size_t)S * H * D, -555.f), part(nsplit > 1 ? (size_t)nsplit * S * H * (D + 2) : 1);
    dim3 grid(S * HB, nsplit);
    const size_t smem = tc_smem(D);
    auto run = [&](auto dd) {
        constexpr int DD = decltype(dd)::value;
        emu_launch(grid, dim3(TC_THREADS), smem, [&] {
            tc_attention_kernel<DD>(q.data(), kv_new.data(), ring.data(), cap, entries.data(), kind, m, sel.data(), K,
                                    sinks.data(), N0, S, H, W, scale, 0, nsplit_want, part.data(), out.data());
        });
    };
    switch (D) {
        case 64: run(std::integral_constant<int, 64>()); break;
        case 128: run(std::integral_constant<int, 128>()); break;
        case 256: run(std::integral_constant<int, 256>()); break;
        case 512: run(std::integral_constant<int, 512>()); break;
        default: printf("FAIL attention: no tensor-core kernel for D %d\n", D); fails++; return;
    }
    if (nsplit > 1)
        emu_launch(dim3(S * H), dim3(128), 0, [&] {
            tc_combine_kernel(part.data(), nsplit, kind, m, K, N0, S, W, 0, nsplit_want, H, D, sinks.data(), out.data());
        });
    double worst = 0;
    for (int s = 0; s < S; s++) {
        const int64_t t = N0 + s, p0 = std::max<int64_t>(0, t - W + 1);
        std::vector<const void*> rows;  // F32 (this step) or F16 rows
        std::vector<bool> isf;
        for (int64_t p = p0; p <= t; p++) {
            if (p >= N0) { rows.push_back(&kv_new[(size_t)(p - N0) * D]); isf.push_back(true); }
            else { rows.push_back(&ring[(size_t)(p % cap) * D]); isf.push_back(false); }
        }
        if (kind != DS4J_ATTN_SLIDING) {
            const int64_t avail = (t + 1) / m;
            const bool pick = kind == DS4J_ATTN_CSA && avail > K;
            for (int64_t i = 0; i < (pick ? K : avail); i++) {
                rows.push_back(&entries[(size_t)(pick ? sel[(size_t)s * K + i] : i) * D]);
                isf.push_back(false);
            }
        }
        auto val = [&](size_t j, int i) { return isf[j] ? (double)((const float*)rows[j])[i] : (double)emu_f16(((const uint16_t*)rows[j])[i]); };
        for (int h = 0; h < H; h++) {
            const float* qr = &q[((size_t)s * H + h) * D];
            std::vector<double> z(rows.size());
            double zmax = sinks[h];
            for (size_t j = 0; j < rows.size(); j++) {
                double acc = 0;
                for (int i = 0; i < D; i++) acc += (double)qr[i] * val(j, i);
                z[j] = acc * scale;
                zmax = std::max(zmax, z[j]);
            }
            double L = std::exp(sinks[h] - zmax);
            for (auto& v : z) L += v = std::exp(v - zmax);
            for (int i = 0; i < D; i++) {
                double o = 0, mag = 0;
                for (size_t j = 0; j < rows.size(); j++) { o += z[j] * val(j, i); mag += z[j] * std::fabs(val(j, i)); }
                o /= L; mag /= L;
                const double got = out[((size_t)s * H + h) * D + i];
                worst = std::max(worst, std::fabs(got - o) / (mag + 1e-30));
                check("attention", got, o, mag, 4e-6, s * H + h, i);
            }
        }
    }
    printf("attention H %d D %d kind %d m %d K %d N0 %ld S %d, up to %d key ranges (last query's of %d keys): worst error %.3g of sum |p v|\n", H, D,
           kind, m, K, (long)N0, S, nsplit, per, worst);
}


// Split FFMA attention (attention.cpp, at_split_*): one layer's cache with a wrapped ring, this step's rows, HCA entries
// or CSA selections. Checks each output against an F64 reference, the F16-in-place run (T = uint16_t) against the F32
// copy (T = float) bit for bit, and every query of a verify step against the same query decoded alone (its step's
// earlier rows moved into the ring) bit for bit.
struct SplitCase {
    int H, D, kind, m, K, W;
    int64_t N0;
    int S;
    double qstd, sinkstd;
};

struct SplitLayer {
    SplitCase c;
    int cap;
    std::vector<float> q, kv_new, sinks;
    std::vector<uint16_t> ring, entries;
    std::vector<int32_t> sel;
};

static SplitLayer split_layer(const SplitCase& c) {
    SplitLayer L;
    L.c = c;
    L.cap = c.W + 8;
    auto f16r = [](double v) { return __half2float(__float2half_rn((float)v)); };
    L.q.resize((size_t)c.S * c.H * c.D);
    for (auto& v : L.q) v = (float)(gauss() * c.qstd);
    L.kv_new.resize((size_t)c.S * c.D);
    for (auto& v : L.kv_new) v = f16r(gauss());
    L.sinks.resize(c.H);
    for (auto& v : L.sinks) v = (float)(gauss() * c.sinkstd);
    L.ring.resize((size_t)L.cap * c.D);
    for (auto& v : L.ring) v = __float2half_rn((float)gauss()).b;
    const int64_t ncomp = c.kind == DS4J_ATTN_SLIDING ? 0 : (c.N0 + c.S) / c.m;
    L.entries.resize((size_t)std::max<int64_t>(ncomp, 1) * c.D + 8);
    for (auto& v : L.entries) v = __float2half_rn((float)gauss()).b;
    L.sel.assign((size_t)c.S * std::max(c.K, 1), 0);
    for (int s = 0; s < c.S; s++) {
        const int64_t avail = c.m > 0 ? (c.N0 + s + 1) / c.m : 0;
        std::vector<int32_t> all(avail);
        for (int64_t e = 0; e < avail; e++) all[e] = (int32_t)e;
        std::shuffle(all.begin(), all.end(), rng);
        for (int i = 0; i < c.K && i < (int)avail; i++) L.sel[(size_t)s * c.K + i] = all[i];
    }
    return L;
}

/**
 * Runs the split kernels (single-sequence launch) on L with cache element type T and NT threads a block; returns out
 * [S, H, D].
 */
template <typename T, int NT = AT_THREADS>
static std::vector<float> split_run(const SplitLayer& L) {
    const SplitCase& c = L.c;
    std::vector<T> ring(L.ring.size()), entries(L.entries.size());
    for (size_t i = 0; i < ring.size(); i++) ring[i] = std::is_same<T, float>::value ? (T)emu_f16(L.ring[i]) : (T)L.ring[i];
    for (size_t i = 0; i < entries.size(); i++)
        entries[i] = std::is_same<T, float>::value ? (T)emu_f16(L.entries[i]) : (T)L.entries[i];
    int nsmax = 1;
    for (int s = 0; s < c.S; s++) nsmax = std::max(nsmax, at_split(attended_rows(c.kind, c.m, c.K, c.N0 + s, c.W)).nsplit);
    const int G = (c.H + AT_HG - 1) / AT_HG;
    std::vector<float> out((size_t)c.S * c.H * c.D, -555.f), part((size_t)c.S * c.H * nsmax * (c.D + 2) + 1, 777.f);
    float* ml = part.data() + (size_t)c.S * c.H * nsmax * c.D;
    const float scale = 1.f / std::sqrt((float)c.D);
    emu_launch(dim3(nsmax, G * c.S), dim3(NT), at_smem(c.D), [&] {
        at_split_kernel<T, NT>(L.q.data(), L.kv_new.data(), ring.data(), L.cap, entries.data(), c.kind, c.m, L.sel.data(), c.K,
                           L.sinks.data(), c.N0, c.H, c.D, c.W, scale, 0, part.data(), ml, nsmax, out.data());
    });
    if (nsmax > 1)
        emu_launch(dim3(c.H, c.S), dim3(128), 0, [&] {
            at_combine_kernel(part.data(), ml, nsmax, c.kind, c.m, c.K, c.N0, c.W, 0, c.H, c.D, L.sinks.data(), out.data());
        });
    return out;
}

/** Query s of L as a decode step of its own: position N0 + s, the step's earlier rows stored into the ring. */
static SplitLayer split_decode(const SplitLayer& L, int s) {
    SplitLayer D = L;
    const SplitCase& c = L.c;
    D.c.N0 = c.N0 + s;
    D.c.S = 1;
    for (int r = 0; r < s; r++) {
        const int64_t p = c.N0 + r;
        for (int i = 0; i < c.D; i++) D.ring[(size_t)(p % L.cap) * c.D + i] = __float2half_rn(L.kv_new[(size_t)r * c.D + i]).b;
    }
    D.q.assign(L.q.begin() + (size_t)s * c.H * c.D, L.q.begin() + (size_t)(s + 1) * c.H * c.D);
    D.kv_new.assign(L.kv_new.begin() + (size_t)s * c.D, L.kv_new.begin() + (size_t)(s + 1) * c.D);
    D.sel.assign(L.sel.begin() + (size_t)s * std::max(c.K, 1), L.sel.begin() + (size_t)(s + 1) * std::max(c.K, 1));
    return D;
}

static int bit_diffs(const float* a, const float* b, size_t n) {
    int d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], 4) != 0;
    return d;
}

static void split_attention(const SplitCase& c) {
    SplitLayer L = split_layer(c);
    const std::vector<float> out = split_run<uint16_t>(L);
    const std::vector<float> out32 = split_run<float>(L);
    const int d32 = bit_diffs(out.data(), out32.data(), out.size());
    if (d32) { printf("FAIL split attention: F16 in place differs from the F32 copy in %d values\n", d32); fails++; }
    // the blocks of AT_THREADS_FEW threads (launches of few blocks) give the same bits as those of AT_THREADS
    const std::vector<float> few = split_run<uint16_t, AT_THREADS_FEW>(L);
    const int dnt = bit_diffs(out.data(), few.data(), out.size());
    if (dnt) { printf("FAIL split attention: %d-thread blocks differ from %d-thread ones in %d values\n", AT_THREADS_FEW, AT_THREADS, dnt); fails++; }
    double worst = 0;
    int ranges = 1;
    const float scale = 1.f / std::sqrt((float)c.D);
    for (int s = 0; s < c.S; s++) {
        const int64_t t = c.N0 + s, p0 = std::max<int64_t>(0, t - c.W + 1);
        ranges = std::max(ranges, at_split(attended_rows(c.kind, c.m, c.K, t, c.W)).nsplit);
        std::vector<std::vector<double>> rows;
        for (int64_t p = p0; p <= t; p++) {
            std::vector<double> r(c.D);
            for (int i = 0; i < c.D; i++)
                r[i] = p >= c.N0 ? (double)L.kv_new[(size_t)(p - c.N0) * c.D + i] : (double)emu_f16(L.ring[(size_t)(p % L.cap) * c.D + i]);
            rows.push_back(r);
        }
        if (c.kind != DS4J_ATTN_SLIDING) {
            const int64_t avail = (t + 1) / c.m;
            const bool pick = c.kind == DS4J_ATTN_CSA && avail > c.K;
            for (int64_t i = 0; i < (pick ? c.K : avail); i++) {
                const int64_t e = pick ? L.sel[(size_t)s * c.K + i] : i;
                std::vector<double> r(c.D);
                for (int j = 0; j < c.D; j++) r[j] = emu_f16(L.entries[(size_t)e * c.D + j]);
                rows.push_back(r);
            }
        }
        for (int h = 0; h < c.H; h++) {
            const float* qr = &L.q[((size_t)s * c.H + h) * c.D];
            std::vector<double> z(rows.size());
            double zmax = L.sinks[h];
            for (size_t j = 0; j < rows.size(); j++) {
                double acc = 0;
                for (int i = 0; i < c.D; i++) acc += (double)qr[i] * rows[j][i];
                z[j] = acc * scale;
                zmax = std::max(zmax, z[j]);
            }
            double den = std::exp(L.sinks[h] - zmax);
            for (auto& v : z) den += v = std::exp(v - zmax);
            for (int i = 0; i < c.D; i++) {
                double o = 0, mag = 0;
                for (size_t j = 0; j < rows.size(); j++) { o += z[j] * rows[j][i]; mag += z[j] * std::fabs(rows[j][i]); }
                o /= den; mag /= den;
                const double got = out[((size_t)s * c.H + h) * c.D + i];
                worst = std::max(worst, std::fabs(got - o) / (mag + 1e-30));
                check("split attention", got, o, mag, 4e-6, s * c.H + h, i);
            }
        }
    }
    // decode vs verify: each query alone gives the same bits as inside the step
    int dv = 0;
    if (c.S > 1)
        for (int s = 0; s < c.S; s++) {
            const std::vector<float> alone = split_run<uint16_t>(split_decode(L, s));
            dv += bit_diffs(alone.data(), out.data() + (size_t)s * c.H * c.D, alone.size());
        }
    if (dv) { printf("FAIL split attention: decoded alone differs from the verify step in %d values\n", dv); fails++; }
    printf("split attention H %d D %d kind %d m %d K %d W %d N0 %ld S %d: up to %d key ranges, worst error %.3g of sum |p v|;"
           " F16 vs F32 copy %d bits differ, decode vs verify %d, %d vs %d threads %d; output hash %016llx\n", c.H, c.D, c.kind,
           c.m, c.K, c.W, (long)c.N0, c.S, ranges, worst, d32, dv, AT_THREADS_FEW, AT_THREADS, dnt,
           (unsigned long long)bits_hash(out.data(), out.size()));
}

/** The rows of a step of several sequences: sequence i's rows at row0 = the rows before it, in reverse order of the views. */
struct StepRows {
    std::vector<float> q, kv;
    std::vector<int32_t> sel;
    std::vector<ds4j_seq_view> views;
};

static StepRows step_rows(const std::vector<SplitLayer>& Ls, int R, int H, int D, int K) {
    StepRows r{std::vector<float>((size_t)R * H * D), std::vector<float>((size_t)R * D),
               std::vector<int32_t>((size_t)R * std::max(K, 1)), std::vector<ds4j_seq_view>(Ls.size())};
    int row = R;
    for (size_t i = 0; i < Ls.size(); i++) {
        const SplitLayer& L = Ls[i];
        row -= L.c.S;
        std::copy(L.q.begin(), L.q.end(), r.q.begin() + (size_t)row * H * D);
        std::copy(L.kv_new.begin(), L.kv_new.end(), r.kv.begin() + (size_t)row * D);
        std::copy(L.sel.begin(), L.sel.end(), r.sel.begin() + (size_t)row * std::max(K, 1));
        r.views[i] = ds4j_seq_view{L.c.N0, L.c.S, row, (void*)L.ring.data(), nullptr, (void*)L.entries.data(), L.cap, 0};
    }
    return r;
}

/**
 * Several sequences through at_split_seqs_kernel, each compared bit for bit with its own single-sequence launch; the
 * same step with the other block size, and on F32 copies made by f16_to_f32_seqs_kernel, bit for bit.
 */
static void split_attention_seqs(int H, int D, int kind, int m, int K, int W, const std::vector<int64_t>& N0s,
                                 const std::vector<int>& Ss) {
    const int n = (int)N0s.size();
    std::vector<SplitLayer> Ls;
    int R = 0, max_s = 0;
    for (int i = 0; i < n; i++) {
        Ls.push_back(split_layer(SplitCase{H, D, kind, m, K, W, N0s[i], Ss[i], 1.0, 1.0}));
        R += Ss[i];
        max_s = std::max(max_s, Ss[i]);
    }
    StepRows rows = step_rows(Ls, R, H, D, K);
    std::vector<float>&q = rows.q, &kv = rows.kv;
    std::vector<int32_t>& sel = rows.sel;
    std::vector<ds4j_seq_view>& views = rows.views;
    int nsmax = 1;
    for (const SplitLayer& L : Ls)
        for (int s = 0; s < L.c.S; s++) nsmax = std::max(nsmax, at_split(attended_rows(kind, m, K, L.c.N0 + s, W)).nsplit);
    const int G = (H + AT_HG - 1) / AT_HG;
    const float scale = 1.f / std::sqrt((float)D);
    // the step through the several-sequence kernels: `kernel` (a block size, a cache type) on the views vs
    auto run = [&](auto kernel, int nt, const ds4j_seq_view* vs) {
        std::vector<float> o((size_t)R * H * D, -555.f), part((size_t)n * max_s * H * nsmax * (D + 2) + 1, 777.f);
        float* ml = part.data() + (size_t)n * max_s * H * nsmax * D;
        emu_launch(dim3(nsmax, G * max_s, n), dim3(nt), at_smem(D), [&] {
            kernel(vs, q.data(), kv.data(), kind, m, sel.data(), K, Ls[0].sinks.data(), H, D, W, scale, max_s, part.data(),
                   ml, nsmax, INT64_MAX, o.data());
        });
        if (nsmax > 1)
            emu_launch(dim3(H, max_s, n), dim3(128), 0, [&] {
                at_combine_seqs_kernel(vs, part.data(), ml, nsmax, kind, m, K, W, max_s, H, D, Ls[0].sinks.data(), INT64_MAX,
                                       o.data());
            });
        return o;
    };
    const std::vector<float> out = run(at_split_seqs_kernel<uint16_t, AT_THREADS>, AT_THREADS, views.data());
    const std::vector<float> few = run(at_split_seqs_kernel<uint16_t, AT_THREADS_FEW>, AT_THREADS_FEW, views.data());
    // the control's copies (ds4j_f16_to_f32_seqs): every view's ring and entries to F32, with room past each view's own
    // rows (as the bounds of a fixed-form step leave), then the F32 kernel on the copies' views
    int ring_rows = 0;
    int64_t max_e = 0;
    for (const ds4j_seq_view& v : views) {
        ring_rows = std::max(ring_rows, v.cap + 3);
        max_e = std::max<int64_t>(max_e, (v.N0 + v.S) / m + 5);
    }
    std::vector<float> dst((size_t)n * (ring_rows + max_e) * D, 999.f);
    std::vector<ds4j_seq_view> views32(n);
    const int64_t chunks = ((int64_t)ring_rows + max_e) * D / 8;
    emu_launch(dim3((unsigned)((chunks + 255) / 256), n), dim3(256), 0, [&] {
        f16_to_f32_seqs_kernel(views.data(), ring_rows, m, max_e, D, dst.data(), views32.data());
    });
    const std::vector<float> copies = run(at_split_seqs_kernel<float, AT_THREADS>, AT_THREADS, views32.data());
    const int dfew = bit_diffs(out.data(), few.data(), out.size()), dcopy = bit_diffs(out.data(), copies.data(), out.size());
    if (dfew) { printf("FAIL split attention seqs: %d-thread blocks differ in %d values\n", AT_THREADS_FEW, dfew); fails++; }
    if (dcopy) { printf("FAIL split attention seqs: the F32 copies differ from the F16 rows in %d values\n", dcopy); fails++; }
    int diffs = 0;
    for (int i = 0; i < n; i++) {
        SplitLayer L = Ls[i];
        L.sinks = Ls[0].sinks;
        const std::vector<float> alone = split_run<uint16_t>(L);
        diffs += bit_diffs(alone.data(), out.data() + (size_t)views[i].row0 * H * D, alone.size());
    }
    if (diffs) { printf("FAIL split attention seqs: %d values differ from the single-sequence launches\n", diffs); fails++; }
    printf("split attention seqs H %d D %d kind %d, %d sequences (max S %d, up to %d key ranges): %d values differ; %d-thread"
           " blocks %d, F32 copies %d; output hash %016llx\n", H, D, kind, n, max_s, nsmax, diffs, AT_THREADS_FEW, dfew, dcopy,
           (unsigned long long)bits_hash(out.data(), out.size()));
}

/**
 * The f16 path of several sequences (ds4j_attention_f16_operands_seqs: the queries of at most short_rows keys through
 * at_split_seqs_kernel, the others through tc_attention_seqs_kernel and its combine) against each sequence alone on
 * ds4j_attention_f16_operands's launches (the split kernel for the queries before its first long one, the
 * tensor-core kernel from there), bit for bit; the tensor-core grid once for the step's queries and once for a bound
 * (as under ds4j_seqs_bounds: more ranges than any query has). The same launches on F32 copies of the rows (the
 * control's: ds4j_attention_f16_operands_f32 alone, ds4j_attention_f16_operands_f32_seqs on f16_to_f32_seqs_kernel's
 * views) must give the same bits too.
 */
static void tc_attention_seqs(int H, int D, int kind, int m, int K, int W, const std::vector<int64_t>& N0s,
                              const std::vector<int>& Ss, int64_t short_rows, int ns_max) {
    const int n = (int)N0s.size();
    std::vector<SplitLayer> Ls;
    int R = 0, max_s = 0;
    for (int i = 0; i < n; i++) {
        Ls.push_back(split_layer(SplitCase{H, D, kind, m, K, W, N0s[i], Ss[i], 1.0, 1.0}));
        Ls[i].sinks = Ls[0].sinks;
        R += Ss[i];
        max_s = std::max(max_s, Ss[i]);
    }
    const float scale = 1.f / std::sqrt((float)D);
    const int HB = (H + TC_ROWS - 1) / TC_ROWS, G = (H + AT_HG - 1) / AT_HG;
    auto launch_tc = [&](dim3 grid, auto&& body) {
        switch (D) {
            case 64: emu_launch(grid, dim3(TC_THREADS), tc_smem(D), [&] { body(std::integral_constant<int, 64>()); }); break;
            case 128: emu_launch(grid, dim3(TC_THREADS), tc_smem(D), [&] { body(std::integral_constant<int, 128>()); }); break;
            case 256: emu_launch(grid, dim3(TC_THREADS), tc_smem(D), [&] { body(std::integral_constant<int, 256>()); }); break;
            case 512: emu_launch(grid, dim3(TC_THREADS), tc_smem(D), [&] { body(std::integral_constant<int, 512>()); }); break;
            default: printf("FAIL f16 attention seqs: no tensor-core kernel for D %d\n", D); fails++; break;
        }
    };
    // each sequence alone, as ds4j_attention_f16_operands runs it, and as ds4j_attention_f16_operands_f32 runs it on
    // F32 copies of the ring and entries
    std::vector<std::vector<float>> alone;
    int longq = 0, shortq = 0, diffs_copy_alone = 0;
    for (const SplitLayer& L : Ls) {
        const SplitCase& c = L.c;
        std::vector<float> ring32(L.ring.size()), entries32(L.entries.size());
        for (size_t i = 0; i < L.ring.size(); i++) ring32[i] = emu_f16(L.ring[i]);
        for (size_t i = 0; i < L.entries.size(); i++) entries32[i] = emu_f16(L.entries[i]);
        std::vector<float> o = split_run<uint16_t>(L);  // the queries before s0 (each query's numbers are its own)
        int s0 = c.S;
        while (s0 > 0 && attended_rows(kind, m, K, c.N0 + s0 - 1, W) > short_rows) s0--;
        shortq += s0;
        longq += c.S - s0;
        std::vector<float> o32 = o;
        if (s0 < c.S) {
            int nmax = 1;
            for (int s = s0; s < c.S; s++) nmax = std::max(nmax, tc_split(attended_rows(kind, m, K, c.N0 + s, W), ns_max).nsplit);
            auto tc_alone = [&](auto ring, auto entries, std::vector<float>& out) {
                std::vector<float> part((size_t)nmax * c.S * H * (D + 2) + 1, 777.f);
                launch_tc(dim3((c.S - s0) * HB, nmax), [&](auto dd) {
                    tc_attention_kernel<decltype(dd)::value>(L.q.data(), L.kv_new.data(), ring, L.cap, entries, kind, m,
                                                             L.sel.data(), K, L.sinks.data(), c.N0, c.S, H, W, scale, s0,
                                                             ns_max, part.data(), out.data());
                });
                if (nmax > 1)
                    emu_launch(dim3((c.S - s0) * H), dim3(128), 0, [&] {
                        tc_combine_kernel(part.data(), nmax, kind, m, K, c.N0, c.S, W, s0, ns_max, H, D, L.sinks.data(),
                                          out.data());
                    });
            };
            tc_alone(L.ring.data(), L.entries.data(), o);
            tc_alone(ring32.data(), entries32.data(), o32);
        }
        diffs_copy_alone += bit_diffs(o.data(), o32.data(), o.size());
        alone.push_back(std::move(o));
    }
    StepRows rows = step_rows(Ls, R, H, D, K);
    std::vector<float>&q = rows.q, &kv = rows.kv;
    std::vector<int32_t>& sel = rows.sel;
    std::vector<ds4j_seq_view>& views = rows.views;
    int nsmax = 1, nmax = 1;
    for (const SplitLayer& L : Ls) {
        for (int s = 0; s < L.c.S; s++) {
            const int64_t nk = attended_rows(kind, m, K, L.c.N0 + s, W);
            nsmax = std::max(nsmax, at_split(nk).nsplit);
            if (nk > short_rows) nmax = std::max(nmax, tc_split(nk, ns_max).nsplit);
        }
    }
    auto run = [&](int tc_ranges, auto zero, const ds4j_seq_view* vs) {
        using T = decltype(zero);
        std::vector<float> o((size_t)R * H * D, -555.f);
        std::vector<float> part((size_t)n * max_s * H * nsmax * (D + 2) + 1, 777.f);
        float* ml = part.data() + (size_t)n * max_s * H * nsmax * D;
        emu_launch(dim3(nsmax, G * max_s, n), dim3(AT_THREADS), at_smem(D), [&] {
            at_split_seqs_kernel<T, AT_THREADS>(vs, q.data(), kv.data(), kind, m, sel.data(), K, Ls[0].sinks.data(), H, D, W,
                                                scale, max_s, part.data(), ml, nsmax, short_rows, o.data());
        });
        if (nsmax > 1)
            emu_launch(dim3(H, max_s, n), dim3(128), 0, [&] {
                at_combine_seqs_kernel(vs, part.data(), ml, nsmax, kind, m, K, W, max_s, H, D, Ls[0].sinks.data(),
                                       short_rows, o.data());
            });
        std::vector<float> tpart((size_t)tc_ranges * n * max_s * H * (D + 2) + 1, 888.f);
        launch_tc(dim3(max_s * HB, tc_ranges, n), [&](auto dd) {
            tc_attention_seqs_kernel<decltype(dd)::value, T>(vs, q.data(), kv.data(), kind, m, sel.data(), K,
                                                             Ls[0].sinks.data(), H, W, scale, short_rows, ns_max, max_s,
                                                             tpart.data(), o.data());
        });
        if (tc_ranges > 1)
            emu_launch(dim3(H, max_s, n), dim3(128), 0, [&] {
                tc_combine_seqs_kernel(vs, tpart.data(), tc_ranges, kind, m, K, W, short_rows, ns_max, max_s, H, D,
                                       Ls[0].sinks.data(), o.data());
            });
        return o;
    };
    // the control's copies (ds4j_f16_to_f32_seqs, with room past each view's own rows as a fixed-form step's bounds leave)
    int ring_rows = 0;
    int64_t max_e = 1;
    for (const ds4j_seq_view& v : views) {
        ring_rows = std::max(ring_rows, v.cap + 3);
        if (m > 0) max_e = std::max<int64_t>(max_e, (v.N0 + v.S) / m + 5);
    }
    std::vector<float> dst((size_t)n * (ring_rows + max_e) * D, 999.f);
    std::vector<ds4j_seq_view> views32(n);
    const int64_t chunks = ((int64_t)ring_rows + max_e) * D / 8;
    emu_launch(dim3((unsigned)((chunks + 255) / 256), n), dim3(256), 0, [&] {
        f16_to_f32_seqs_kernel(views.data(), ring_rows, m, max_e, D, dst.data(), views32.data());
    });
    int diffs = 0, diffs_bound = 0;
    const std::vector<float> out = run(nmax, uint16_t(0), views.data()),
                             bounded = run(std::max(nmax, ns_max) + 1, uint16_t(0), views.data()),
                             copies = run(std::max(nmax, ns_max) + 1, 0.f, views32.data());
    for (int i = 0; i < n; i++) {
        diffs += bit_diffs(alone[i].data(), out.data() + (size_t)views[i].row0 * H * D, alone[i].size());
        diffs_bound += bit_diffs(alone[i].data(), bounded.data() + (size_t)views[i].row0 * H * D, alone[i].size());
    }
    const int diffs_copy = bit_diffs(out.data(), copies.data(), out.size());
    if (diffs) { printf("FAIL f16 attention seqs: %d values differ from the single-sequence launches\n", diffs); fails++; }
    if (diffs_bound) { printf("FAIL f16 attention seqs: a bound's grid gives %d values different\n", diffs_bound); fails++; }
    if (diffs_copy_alone || diffs_copy) {
        printf("FAIL f16 attention seqs: on F32 copies %d values differ alone, %d in the step\n", diffs_copy_alone, diffs_copy);
        fails++;
    }
    if (!longq || !shortq) { printf("FAIL f16 attention seqs: the case has no %s queries\n", longq ? "short" : "long"); fails++; }
    printf("f16 attention seqs H %d D %d kind %d, %d sequences (max S %d; %d queries of at most %lld keys, %d over; up to %d"
           " tensor-core ranges of at most %d): %d values differ, %d with the bound's grid, %d + %d on F32 copies (alone +"
           " step); output hash %016llx\n",
           H, D, kind, n, max_s, shortq, (long long)short_rows, longq, nmax, ns_max, diffs, diffs_bound, diffs_copy_alone,
           diffs_copy, (unsigned long long)bits_hash(out.data(), out.size()));
}

// ------------------------------------------------------------------------------------------- skinny products

template <bool MOE>
static void launch_skinny(int fmt, const sk::Shape& sh, dim3 grid, const sk::Args& a) {
    auto run = [&](auto f, auto m, auto n) {
        if constexpr (sk::built<decltype(f)::value, decltype(m)::value, decltype(n)::value>)
            emu_launch(grid, dim3(sh.nw * 32), 0, [&] {
                sk::skinny_kernel<decltype(f)::value, decltype(m)::value, decltype(n)::value, MOE>(a);
            });
        else {
            printf("FAIL skinny shape not built: fmt %d m-tiles %d n-tiles %d\n", fmt, sh.mt, sh.nt);
            fails++;
        }
    };
    auto by_nt = [&](auto f, auto m) {
        switch (sh.nt) {
            case 1: run(f, m, std::integral_constant<int, 1>()); break;
            case 2: run(f, m, std::integral_constant<int, 2>()); break;
            case 3: run(f, m, std::integral_constant<int, 3>()); break;
            case 4: run(f, m, std::integral_constant<int, 4>()); break;
            default: run(f, m, std::integral_constant<int, 8>()); break;
        }
    };
    auto by_mt = [&](auto f) {
        switch (sh.mt) {
            case 1: by_nt(f, std::integral_constant<int, 1>()); break;
            case 2: by_nt(f, std::integral_constant<int, 2>()); break;
            default: by_nt(f, std::integral_constant<int, 4>()); break;
        }
    };
    switch (fmt) {
        case DS4J_FMT_F16: by_mt(std::integral_constant<int, DS4J_FMT_F16>()); break;
        case DS4J_FMT_BF16: by_mt(std::integral_constant<int, DS4J_FMT_BF16>()); break;
        case DS4J_FMT_FP8_E4M3_B128: by_mt(std::integral_constant<int, DS4J_FMT_FP8_E4M3_B128>()); break;
        default: by_mt(std::integral_constant<int, DS4J_FMT_FP4_E2M1_B32>()); break;
    }
}

/**
 * The x-sharing kernel (sk::skinny_smem_kernel) as its host entry runs it, with the partials sum when split: the plan of
 * sk::sm_plan with the column split forced (split 1), or every partition per block (0), and sl chunk groups per
 * staged slice when sl > 0 (small slices: several per partition). grid as the host entry's, without the partitions.
 */
template <bool MOE>
static void launch_skinny_smem(int fmt, sk::SmPlan pl, int split, int sl, dim3 grid, sk::Args a, int rows) {
    pl.b.split = split;
    if (sl > 0) {
        const int ks = (fmt == DS4J_FMT_FP4_E2M1_B32 ? 32 : fmt == DS4J_FMT_FP8_E4M3_B128 ? 16 : 8) / 4;
        pl.b.sl = sl;
        pl.smem = (int64_t)sl * pl.nt * ks * 512;
    }
    std::vector<float> part;
    if (split) {
        part.assign((size_t)pl.b.nw * pl.b.ns * rows, std::nanf(""));
        pl.b.part = part.data();
        if (MOE) grid.z = pl.b.nw;
        else grid.y = pl.b.nw;
    }
    auto run = [&](auto f, auto n) {
        constexpr int F = decltype(f)::value, N = decltype(n)::value;
        emu_launch(grid, dim3(sk::SM_W * 32), (size_t)pl.smem, [&] {
            // the lean instance where the plan asks for it (pl.b.lean), as launch_smem
            if constexpr ((F == DS4J_FMT_FP8_E4M3_B128 || F == DS4J_FMT_BF16) && N == 1 && !MOE) {
                if (pl.b.lean) return sk::skinny_smem_kernel<F, 1, N, MOE, false, true>(a, pl.b);
            }
            sk::skinny_smem_kernel<F, 1, N, MOE>(a, pl.b);
        });
    };
    auto by_nt = [&](auto f) {
        switch (pl.nt) {
            case 1: run(f, std::integral_constant<int, 1>()); break;
            case 2: run(f, std::integral_constant<int, 2>()); break;
            case 3: run(f, std::integral_constant<int, 3>()); break;
            case 4: run(f, std::integral_constant<int, 4>()); break;
            default: run(f, std::integral_constant<int, 8>()); break;
        }
    };
    switch (fmt) {
        case DS4J_FMT_F16: by_nt(std::integral_constant<int, DS4J_FMT_F16>()); break;
        case DS4J_FMT_BF16: by_nt(std::integral_constant<int, DS4J_FMT_BF16>()); break;
        case DS4J_FMT_FP8_E4M3_B128: by_nt(std::integral_constant<int, DS4J_FMT_FP8_E4M3_B128>()); break;
        default: by_nt(std::integral_constant<int, DS4J_FMT_FP4_E2M1_B32>()); break;
    }
    if (split) {
        combine(pl.b.part, pl.b.nw, pl.b.ns, rows, a.y, a.ldy, MOE ? a.ids : nullptr, MOE ? a.w_table : nullptr);
    }
}

/** Values of n floats at a and b whose bits differ. */
static int bits_differ(const float* a, const float* b, size_t n) {
    int d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(a + i, b + i, 4) != 0;
    return d;
}

/**
 * The shape the host entry takes (sk::shape_for); mt_force > 0 takes that many m-tiles per warp in narrow passes
 * instead (to reach both variants with small shapes: the column split follows, as it would for a shape that chose it).
 */
static sk::Shape skinny_shape(int fmt, int64_t grp, int64_t groups, int units, int64_t rb, int S, int mt_force) {
    sk::Shape sh = sk::shape_for(fmt, grp, groups, units, rb, S);
    if (mt_force > 0) {
        const int narrow_mt = mt_force;
        sh.nw = sk::warps_for(narrow_mt, groups * ((grp + 16 * narrow_mt - 1) / (16 * narrow_mt)) * units, rb);
        if (sh.nt <= 4) {
            sh.mt = narrow_mt;
            sh.tpg = (grp + 16 * narrow_mt - 1) / (16 * narrow_mt);
        }
    }
    return sh;
}

/**
 * The skinny dense product as the host entry runs it (skinny_matmul): y [S, ldy] for x [S, ldx]; mt_force as for
 * skinny_shape.
 */
static void skinny_dense_run(int fmt, const WView& v, int rows, int grp, int64_t xgs, const float* x, int64_t ldx, float* y,
                             int64_t ldy, int S, int mt_force) {
    const int groups = rows / grp;
    const sk::Shape sh = skinny_shape(fmt, grp, groups, 1, row_bytes_of(fmt, v.cols), S, mt_force);
    sk::Args a{};
    a.v = v; a.rows = rows; a.grp = grp; a.tiles_per_grp = (int)sh.tpg; a.xgs = xgs;
    a.x = x; a.ldx = ldx; a.y = y; a.ldy = ldy; a.S = S;
    launch_skinny<false>(fmt, sh, dim3((unsigned)(groups * sh.tpg)), a);
}

/** Scales above 2^7 (FP8) and 2^1 (FP4) take the two-step multiplication: a quarter of the blocks get one. */
static void big_scales(Mat& m) {
    for (size_t i = 0; i < m.scale.size(); i += 4) m.scale[i] = (uint8_t)(m.fmt == DS4J_FMT_FP8_E4M3_B128 ? 136 + i % 5 : 129 + i % 7);
}

/** Runs of the lean instance (sk::sm_lean) that skinny_dense compared, so that a run shows it ran. */
static int lean_runs = 0;
/** LEAN_ONLY: slices of 2, 3 and 5 chunk groups too (odd batches of the lean pipeline), and no generic smem runs. */
static bool lean_sweep = false;

// y[s, r] for rows [from, from+rows) with groups; batch invariance: rows 0, S/2 and S-1 alone (S = 1) give the same
// bits as inside the step
static void skinny_dense(int fmt, int rows_total, int from, int rows, int cols, int grp, int S, int pad, bool big = false,
                         int mt = 0) {
    Mat m = random_mat(fmt, rows_total, cols);
    if (big) big_scales(m);
    WView v = view(m, from);
    const int groups = rows / grp;
    const int64_t xgs = groups > 1 ? cols + 4 : 0;
    const int64_t ldx = (groups - 1) * xgs + cols + pad, ldy = rows + 3;
    std::vector<float> x(ldx * S + 16), y(ldy * S, -777.f);
    float* xp = (float*)(((uintptr_t)x.data() + 15) & ~(uintptr_t)15);
    fill_x(xp, ldx, S);
    skinny_dense_run(fmt, v, rows, grp, xgs, xp, ldx, y.data(), ldy, S, mt);
    double worst = 0;
    for (int s = 0; s < S; s++)
        for (int r = 0; r < rows; r++) {
            double acc = 0, mag = 0;
            for (int c = 0; c < cols; c++) {
                double p = wref(v, fmt, r, c) * xp[s * ldx + (r / grp) * xgs + c];
                acc += p; mag += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(y[s * ldy + r] - acc) / mag);
            check("skinny dense", y[s * ldy + r], acc, mag, 1e-5, s, r);
        }
    for (int s = 0; s < S; s++) for (int r = rows; r < ldy; r++) if (y[s * ldy + r] != -777.f) { printf("FAIL skinny wrote padding\n"); fails++; }
    int same = 0;
    for (int s : {0, S / 2, S - 1}) {
        std::vector<float> y1(ldy, -777.f);
        skinny_dense_run(fmt, v, rows, grp, xgs, xp + s * ldx, ldx, y1.data(), ldy, 1, mt);
        if (memcmp(y1.data(), &y[s * ldy], 4 * ldy) != 0) { if (fails < 20) printf("FAIL skinny row %d alone differs from S=%d\n", s, S); fails++; }
        else same++;
    }
    // the x-sharing kernel, split and not, with whole and one-group slices: the same bits as the kernel above
    int diff = 0, runs = 0;
    {
        sk::SmPlan pl = sk::sm_plan(nullptr, fmt, grp, groups, 1, row_bytes_of(fmt, cols), S, S, rows);
        const sk::Shape sh0 = skinny_shape(fmt, grp, groups, 1, row_bytes_of(fmt, cols), S, 0);
        if (pl.b.nw != sh0.nw) { printf("FAIL skinny smem plan: %d partitions, the kernel %d\n", pl.b.nw, sh0.nw); fails++; }
        // forced m-tiles: the column split of the shapes that choose them
        pl.b.nw = skinny_shape(fmt, grp, groups, 1, row_bytes_of(fmt, cols), S, mt).nw;
        for (int split : {0, 1})
            for (int sl : {0, 1}) {
                std::vector<float> y2(ldy * S, -777.f);
                sk::Args a{};
                a.v = v; a.rows = rows; a.grp = grp; a.xgs = xgs; a.x = xp; a.ldx = ldx; a.y = y2.data(); a.ldy = ldy; a.S = S;
                launch_skinny_smem<false>(fmt, pl, split, sl, dim3((unsigned)(groups * pl.b.rgpg)), a, rows);
                diff += bits_differ(y2.data(), y.data(), y.size());
                runs++;
            }
        if (diff) { printf("FAIL skinny smem: %d values differ from the kernel above\n", diff); fails++; }
        // the lean instance where the host entry takes it (sk::sm_lean)
        if (sk::sm_lean(fmt, pl.nt, pl.wg, v, grp)) {
            int ldiff = 0;
            // whole and one-group slices; LEAN_ONLY also 2, 3 and 5 chunk groups (odd batches of the lean pipeline)
            const std::vector<int> slices = lean_sweep ? std::vector<int>{0, 1, 2, 3, 5} : std::vector<int>{0, 1};
            for (int split : {0, 1})
                for (int sl : slices) {
                    std::vector<float> y2(ldy * S, -777.f);
                    sk::Args a{};
                    a.v = v; a.rows = rows; a.grp = grp; a.xgs = xgs; a.x = xp; a.ldx = ldx; a.y = y2.data(); a.ldy = ldy; a.S = S;
                    sk::SmPlan lp = pl;
                    lp.b.lean = 1;
                    launch_skinny_smem<false>(fmt, lp, split, sl, dim3((unsigned)(groups * lp.b.rgpg)), a, rows);
                    ldiff += bits_differ(y2.data(), y.data(), y.size());
                    lean_runs++;
                }
            if (ldiff) { printf("FAIL skinny smem lean: %d values differ from the kernel above\n", ldiff); fails++; }
            diff += ldiff;
        }
    }
    printf("skinny dense fmt %d rows %d (from %d) cols %d grp %d S %d%s%s: worst rel %.3g; %d rows alone bit-identical;"
           " shared-x kernel (%d runs, %d lean in all so far): %d values differ\n", fmt, rows, from, cols, grp, S,
           big ? " big scales" : "", mt ? " (m-tiles forced)" : "", worst, same, runs, lean_runs, diff);
}

/**
 * Skinny routed experts: ids with an expert picked twice by one token, experts never picked, expert 1 misaligned
 * (when misalign), expert `null_e` in host memory (its pick rows untouched); then every pick of token s = 0 and S-1
 * again alone (S = 1) must give the same bits.
 */
static void skinny_moe_case(int fmt, int E, int k, int S, int rows, int cols, bool per_pick, bool misalign, int null_e,
                            int mt_force = 0) {
    std::vector<Mat> ms;
    std::vector<void*> wt(E), st(E);
    std::vector<std::vector<uint8_t>> shifted(E);
    for (int e = 0; e < E; e++) ms.push_back(random_mat(fmt, rows, cols));
    for (int e = 0; e < E; e++) {
        wt[e] = ms[e].data.data();
        if (misalign && e == 1) {
            shifted[e].resize(ms[e].data.size() + 8);
            memcpy(shifted[e].data() + 8, ms[e].data.data(), ms[e].data.size());
            wt[e] = shifted[e].data() + 8;
        }
        st[e] = ms[e].scale.empty() ? nullptr : ms[e].scale.data();
    }
    if (null_e >= 0) wt[null_e] = nullptr;
    const int P = S * k;
    std::vector<int32_t> ids(P);
    for (int s = 0; s < S; s++)
        for (int j = 0; j < k; j++) ids[s * k + j] = (s % 3 == 1 && j == 1) ? ids[s * k] : (int)((s * 7 + j * 3) % (E - 1));
    const int xr = per_pick ? P : S;
    const int64_t ldx = cols + 4, ldy = rows + 1;
    std::vector<float> x(ldx * xr + 16), y(ldy * P, -777.f);
    float* xp = (float*)(((uintptr_t)x.data() + 15) & ~(uintptr_t)15);
    fill_x(xp, ldx, xr);
    int mt = 0;
    auto run = [&](const int32_t* idp, int s_count, const float* xb, float* yb) {
        const sk::Shape sh = skinny_shape(fmt, rows, 1, k, row_bytes_of(fmt, cols), s_count, mt_force);
        if (s_count == S) mt = sh.mt;
        sk::Args a{};
        a.v.scale_kind = DS4J_SCALE_E8M0; a.v.cols = cols; a.v.scale_cols = (cols + 127) >> 7;
        a.rows = rows; a.x = xb; a.ldx = ldx; a.y = yb; a.ldy = ldy; a.S = s_count;
        a.w_table = wt.data(); a.scale_table = fmt >= DS4J_FMT_FP8_E4M3_B128 ? st.data() : nullptr; a.row_base_table = nullptr;
        a.ids = idp; a.P = s_count * k; a.k = k; a.x_per_pick = per_pick;
        launch_skinny<true>(fmt, sh, dim3(s_count * k, (unsigned)sh.tpg), a);
    };
    run(ids.data(), S, xp, y.data());
    double worst = 0;
    for (int p = 0; p < P; p++) {
        if (wt[ids[p]] == nullptr) {
            for (int r = 0; r < ldy; r++) if (y[p * ldy + r] != -777.f) { if (fails < 20) printf("FAIL skinny moe wrote host pick %d\n", p); fails++; break; }
            continue;
        }
        WView v = view(ms[ids[p]], 0);
        for (int r = 0; r < rows; r++) {
            double acc = 0, mag = 0;
            for (int c = 0; c < cols; c++) {
                double pr = wref(v, fmt, r, c) * xp[(per_pick ? p : p / k) * ldx + c];
                acc += pr; mag += std::fabs(pr);
            }
            worst = std::max(worst, std::fabs(y[p * ldy + r] - acc) / mag);
            check("skinny moe", y[p * ldy + r], acc, mag, 1e-5, p, r);
        }
        if (y[p * ldy + rows] != -777.f) { printf("FAIL skinny moe wrote padding\n"); fails++; }
    }
    int diff = 0, runs = 0;
    {
        sk::SmPlan pl = sk::sm_plan(nullptr, fmt, rows, 1, k, row_bytes_of(fmt, cols), S, P, rows);
        pl.b.nw = skinny_shape(fmt, rows, 1, k, row_bytes_of(fmt, cols), S, mt_force).nw;
        // the grid over picks or over distinct experts (a.E, moe_block_expert), one or two row groups per block
        for (int split : {0, 1})
            for (int sl : {0, 1})
                for (int eg : {0, 1})
                    for (int rg : {1, 2}) {
                        // one-group slices with two row groups only where that makes several slices per partition
                        if (sl && (eg || (rg > 1 && pl.b.sl < 2))) continue;
                        if (rg > pl.b.rgpg) continue;
                        std::vector<float> y2(ldy * P, -777.f);
                        sk::Args a{};
                        a.v.scale_kind = DS4J_SCALE_E8M0; a.v.cols = cols; a.v.scale_cols = (cols + 127) >> 7;
                        a.rows = rows; a.x = xp; a.ldx = ldx; a.y = y2.data(); a.ldy = ldy; a.S = S;
                        a.w_table = wt.data(); a.scale_table = fmt >= DS4J_FMT_FP8_E4M3_B128 ? st.data() : nullptr; a.row_base_table = nullptr;
                        a.ids = ids.data(); a.P = P; a.k = k; a.x_per_pick = per_pick;
                        a.E = eg ? E : 0;
                        sk::SmPlan p2 = pl;
                        p2.b.rg = rg;
                        launch_skinny_smem<true>(fmt, p2, split, sl, dim3((unsigned)(eg ? E : P), (unsigned)((pl.b.rgpg + rg - 1) / rg)), a, rows);
                        diff += bits_differ(y2.data(), y.data(), y.size());
                        runs++;
                    }
        if (diff) { printf("FAIL skinny moe smem: %d values differ from the kernel above\n", diff); fails++; }
    }
    int same = 0;
    for (int s : {0, S - 1}) {
        std::vector<float> y1(ldy * k, -777.f);
        run(&ids[s * k], 1, xp + (per_pick ? s * k : s) * ldx, y1.data());
        if (memcmp(y1.data(), &y[s * k * ldy], 4 * ldy * k) != 0) { if (fails < 20) printf("FAIL skinny moe token %d alone differs\n", s); fails++; }
        else same++;
    }
    printf("skinny moe fmt %d E %d k %d S %d rows %d cols %d per_pick %d misalign %d null %d m-tiles %d: worst rel %.3g; %d tokens"
           " alone bit-identical; shared-x kernel (%d runs): %d values differ\n", fmt, E, k, S, rows, cols, per_pick,
           misalign, null_e, mt, worst, same, runs, diff);
}

// Top-k of the Lightning Indexer (indexer.cpp): the multi-block kernels against a sorted reference (larger key
// first, ties to the lower index, NaN lowest, -0 == +0, picks in index order) and against the one-block kernel, bit for
// bit, on single rows and on several sequences; entries past a row's available set hold +inf (a read would pick them).
static uint32_t host_order_key(float f) {
    if (std::isnan(f)) return 0u;
    if (f == 0.f) f = 0.f;
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static float topk_value(int dist) {
    static const float few[] = {NAN, -0.f, 0.f, 1.f, -1.f, 2.f, INFINITY, -INFINITY};
    switch (dist) {
        case 0: return (float)gauss();
        case 1: return few[rng() % 8];
        case 2: return rng() % 97 == 0 ? NAN : 0.5f;
        default: return std::round((float)gauss() * 4.f) / 4.f;
    }
}

static void topk_multi_run(const ds4j_seq_view* views, const float* sc, int64_t ld, int64_t N0, int ny, int nz, int rows,
                           int64_t most, int m, int K, int32_t* sel) {
    const int64_t chunks = (most + TK_CHUNK - 1) / TK_CHUNK;
    std::vector<uint32_t> scr(tk_scratch_words(rows, chunks), 0xdeadbeefu);
    std::fill(scr.begin(), scr.begin() + (int64_t)rows * TK_HIST, 0u);
    dim3 grid((unsigned)chunks, ny, nz);
    for (int p = 0; p < TK_PASSES; p++)
        emu_launch(grid, dim3(TK_THREADS), 0, [&] { tk_hist_kernel(views, sc, ld, N0, m, K, sel, scr.data(), rows, chunks, p); });
    emu_launch(grid, dim3(TK_THREADS), 0, [&] { tk_count_kernel(views, sc, ld, N0, m, K, sel, scr.data(), rows, chunks); });
    emu_launch(grid, dim3(TK_THREADS), 0, [&] { tk_write_kernel(views, sc, ld, N0, m, K, sel, scr.data(), rows, chunks); });
}

/** Rows of sequences (N0s[i], Ss[i]) in one scores array; the multi-block run over all (seqs) or one call per sequence. */
static std::function<float(int, int64_t)> topk_gen;  // EDGES_ONLY: value of row r, entry e (unset: topk_value)
static void topk_case(const std::vector<int64_t>& N0s, const std::vector<int>& Ss, int m, int K, int dist, bool old) {
    const int n = (int)N0s.size();
    int R = 0;
    int64_t most = 0;
    for (int i = 0; i < n; i++) { R += Ss[i]; most = std::max(most, (N0s[i] + Ss[i]) / m); }
    const int64_t ld = most + 5;
    std::vector<float> sc((size_t)R * ld);
    std::vector<ds4j_seq_view> views(n);
    for (int i = 0, r0 = 0; i < n; r0 += Ss[i], i++) {
        views[i] = ds4j_seq_view{N0s[i], Ss[i], r0, nullptr, nullptr, nullptr, 0, 0};
        for (int s = 0; s < Ss[i]; s++) {
            const int64_t avail = (N0s[i] + s + 1) / m;
            for (int64_t e = 0; e < ld; e++) sc[(size_t)(r0 + s) * ld + e] = e < avail ? (topk_gen ? topk_gen(r0 + s, e) : topk_value(dist)) : INFINITY;
        }
    }
    std::vector<int32_t> a((size_t)R * K, -7), b((size_t)R * K, -7), c((size_t)R * K, -7);
    int max_s = *std::max_element(Ss.begin(), Ss.end());
    if (n > 1) topk_multi_run(views.data(), sc.data(), ld, 0, max_s, n, R, most, m, K, a.data());
    for (int i = 0; i < n; i++) {
        const int r0 = views[i].row0;
        const float* s0 = sc.data() + (size_t)r0 * ld;
        const int64_t mi = (N0s[i] + Ss[i]) / m;
        if (mi <= K) continue;
        topk_multi_run(nullptr, s0, ld, N0s[i], Ss[i], 1, Ss[i], mi, m, K, b.data() + (size_t)r0 * K);
        if (old) emu_launch(dim3(Ss[i]), dim3(TOPK_THREADS), 0, [&] { topk_kernel(s0, ld, N0s[i], m, K, c.data() + (size_t)r0 * K); });
    }
    std::vector<int32_t> d((size_t)R * K, -7);
    if (old && n > 1) emu_launch(dim3(max_s, n), dim3(TOPK_THREADS), 0, [&] { topk_seqs_kernel(views.data(), sc.data(), ld, m, K, d.data()); });
    int rows_checked = 0;
    for (int i = 0, r = 0; i < n; i++)
        for (int s = 0; s < Ss[i]; s++, r++) {
            const int64_t avail = (N0s[i] + s + 1) / m;
            const int32_t* got = b.data() + (size_t)r * K;
            if (avail <= K) {
                for (int j = 0; j < K; j++)
                    if (got[j] != -7 || (n > 1 && a[(size_t)r * K + j] != -7) || c[(size_t)r * K + j] != -7 || d[(size_t)r * K + j] != -7) { if (fails < 20) printf("FAIL topk wrote row %d\n", r); fails++; break; }
                continue;
            }
            std::vector<int32_t> idx(avail);
            for (int64_t e = 0; e < avail; e++) idx[e] = (int32_t)e;
            const float* v = sc.data() + (size_t)r * ld;
            std::stable_sort(idx.begin(), idx.end(), [&](int32_t x, int32_t y) { return host_order_key(v[x]) > host_order_key(v[y]); });
            idx.resize(K);
            std::sort(idx.begin(), idx.end());
            rows_checked++;
            if (memcmp(idx.data(), got, 4 * K) != 0) { if (fails < 20) printf("FAIL topk row %d differs from the reference\n", r); fails++; }
            if (n > 1 && memcmp(got, a.data() + (size_t)r * K, 4 * K) != 0) { if (fails < 20) printf("FAIL topk seqs row %d differs\n", r); fails++; }
            if (old && n > 1 && memcmp(got, d.data() + (size_t)r * K, 4 * K) != 0) { if (fails < 20) printf("FAIL topk one-block seqs row %d differs\n", r); fails++; }
            if (old && memcmp(got, c.data() + (size_t)r * K, 4 * K) != 0) { if (fails < 20) printf("FAIL topk row %d differs from the one-block kernel\n", r); fails++; }
        }
    printf("topk %d sequences, most %ld entries, m %d K %d dist %d: %d rows equal the reference%s%s; hash %016llx\n", n, (long)most, m, K,
           dist, rows_checked, n > 1 ? ", seqs == single" : "", old ? ", == one-block kernel" : "",
           (unsigned long long)bits_hash((const float*)c.data(), c.size()));
}
#include "mhc_cases.h"

/**
 * The compressor pooling (compress_pool_kernel: rows shared across the block, sums in row order) against the
 * arithmetic of the earlier kernel, one thread per channel walking the window with 256 threads a block (the order of
 * CpuBackend#compress), bit for bit: w, m, overlap, positions N0 .. N0+S-1, a ring of cap rows (0: none, N0 = 0).
 */
static void compress_case(int w, int m, int overlap, int64_t N0, int S, int cap, int rope_dim) {
    const int cw = overlap ? 2 * w : w;
    const int64_t total = N0 + S;
    std::vector<float> A(total * cw), Z(total * cw), pb((size_t)m * cw), nw(w), inv(rope_dim / 2);
    for (auto& v : A) v = (float)gauss();
    for (auto& v : Z) v = (float)(2 * gauss());
    for (auto& v : pb) v = (float)(0.5 * gauss());
    for (auto& v : nw) v = (float)(1 + 0.1 * gauss());
    for (int i = 0; i < rope_dim / 2; i++) inv[i] = (float)std::pow(10000.0, -2.0 * i / rope_dim);
    std::vector<float> ra(cap > 0 ? (size_t)cap * cw : 1, NAN), rz(ra.size(), NAN);
    for (int64_t p = std::max<int64_t>(0, N0 - cap); p < N0; p++)
        for (int c = 0; c < cw; c++) {
            ra[(p % cap) * cw + c] = A[p * cw + c];
            rz[(p % cap) * cw + c] = Z[p * cw + c];
        }
    const float eps = 1e-6f;
    const int64_t nwin = total / m - N0 / m;
    // a launch gets 48 KiB of shared memory without opting in: the dynamic part and the kernel's 32 doubles
    if (pool_smem(w) + 32 * sizeof(double) > 48 * 1024) { printf("FAIL compress pooling w %d: %zu bytes of shared memory\n", w, pool_smem(w)); fails++; }
    std::vector<uint16_t> got(total / m * w + 1, 0xdead), want(got);
    emu_launch(dim3((unsigned)nwin), dim3(POOL_THREADS), pool_smem(w), [&] {
        compress_pool_kernel(cap > 0 ? ra.data() : nullptr, cap > 0 ? rz.data() : nullptr, cap, A.data() + N0 * cw,
                             Z.data() + N0 * cw, N0, m, w, overlap, pb.data(), nw.data(), eps, inv.data(), rope_dim,
                             got.data());
    });
    std::vector<float> pooled(w);
    for (int64_t win = N0 / m; win < total / m; win++) {
        const int64_t prev = (win - 1) * m, cur = win * m;
        const bool has_prev = overlap && win > 0;
        const int voff = overlap ? w : 0;
        for (int ch = 0; ch < w; ch++) {
            float mx = -INFINITY;
            if (has_prev) for (int j = 0; j < m; j++) mx = fmaxf(mx, add(Z[(prev + j) * cw + ch], pb[j * cw + ch]));
            for (int j = 0; j < m; j++) mx = fmaxf(mx, add(Z[(cur + j) * cw + voff + ch], pb[j * cw + voff + ch]));
            float sum = 0, acc = 0;
            if (has_prev)
                for (int j = 0; j < m; j++) {
                    const float e = exp_d(sub(add(Z[(prev + j) * cw + ch], pb[j * cw + ch]), mx));
                    sum = add(sum, e);
                    acc = add(acc, mul(e, A[(prev + j) * cw + ch]));
                }
            for (int j = 0; j < m; j++) {
                const float e = exp_d(sub(add(Z[(cur + j) * cw + voff + ch], pb[j * cw + voff + ch]), mx));
                sum = add(sum, e);
                acc = add(acc, mul(e, A[(cur + j) * cw + voff + ch]));
            }
            pooled[ch] = acc / sum;
        }
        // the sum of squares of a 256-thread block: per thread its channels in order, per warp the xor butterfly, then
        // the warps in order
        double part[256] = {0};
        for (int ch = 0; ch < w; ch++) part[ch % 256] += (double)mul(pooled[ch], pooled[ch]);
        double ss = 0;
        for (int wp = 0; wp < 8; wp++) {
            double v[32];
            for (int l = 0; l < 32; l++) v[l] = part[wp * 32 + l];
            for (int o = 16; o > 0; o >>= 1) {
                double n[32];
                for (int l = 0; l < 32; l++) n[l] = v[l] + v[l ^ o];
                memcpy(v, n, sizeof v);
            }
            ss += v[0];
        }
        const float iv = (float)(1.0 / sqrt((double)add((float)(ss / w), eps)));
        for (int ch = 0; ch < w; ch++) pooled[ch] = mul(nw[ch], mul(pooled[ch], iv));
        const float ft = (float)(win * m);
        for (int i = 0; i < rope_dim / 2; i++) {
            const double phi = (double)mul(inv[i], ft);
            const float c = (float)cos(phi), sn = (float)sin(phi);
            float* base = pooled.data() + (w - rope_dim);
            const float a0 = base[2 * i], b0 = base[2 * i + 1];
            base[2 * i] = sub(mul(a0, c), mul(b0, sn));
            base[2 * i + 1] = add(mul(b0, c), mul(a0, sn));
        }
        for (int ch = 0; ch < w; ch++) want[win * w + ch] = f32_to_f16(pooled[ch]);
    }
    int d = 0;
    for (size_t i = 0; i < got.size(); i++) d += got[i] != want[i];
    if (d) { printf("FAIL compress pooling w %d m %d overlap %d N0 %lld S %d cap %d: %d values differ\n", w, m, overlap, (long long)N0, S, cap, d); fails++; }
    // the channels in slices of POOL_SLICE (ds4j_compress_pool with few windows): pooled into F32 scratch, then a block a
    // window finishes each entry; the same values
    int ds = -1;
    if (w % POOL_SLICE == 0) {
        std::vector<float> part((size_t)nwin * w, NAN);
        std::vector<uint16_t> got2(got.size(), 0xdead);
        emu_launch(dim3((unsigned)nwin, (unsigned)(w / POOL_SLICE)), dim3(POOL_THREADS), pool_smem(POOL_SLICE), [&] {
            compress_pool_part_kernel(cap > 0 ? ra.data() : nullptr, cap > 0 ? rz.data() : nullptr, cap, A.data() + N0 * cw,
                                      Z.data() + N0 * cw, N0, m, w, overlap, pb.data(), part.data());
        });
        emu_launch(dim3((unsigned)nwin), dim3(POOL_THREADS), (size_t)w * sizeof(float), [&] {
            compress_pool_finish_kernel(part.data(), N0, m, w, nw.data(), eps, inv.data(), rope_dim, got2.data());
        });
        ds = 0;
        for (size_t i = 0; i < got2.size(); i++) ds += got2[i] != want[i];
        if (ds) { printf("FAIL compress pooling in slices w %d m %d overlap %d N0 %lld S %d cap %d: %d values differ\n", w, m, overlap, (long long)N0, S, cap, ds); fails++; }
    }
    char sl[64] = ", no slices (width not a multiple of 32)";
    if (ds >= 0) snprintf(sl, sizeof sl, ", %d in slices", ds);
    printf("compress pooling w %d m %d overlap %d N0 %lld S %d cap %d: %lld windows, %d values differ from the one-thread-per-channel order%s\n",
           w, m, overlap, (long long)N0, S, cap, (long long)nwin, d, sl);
}


// EDGES_ONLY=1: adversarial cases of the one-block top-k (radix bin found by one warp, both counts in one scan) and of
// the tensor-core indexer scores (query rows staged in registers), written by a breaker of those kernels (forty-third
// session): EDGES_TOPK=0 / EDGES_IDX=0 skip a half, EDGES_SEL=text runs the top-k cases whose name holds it,
// EDGES_IDX_QUICK=1 one V4-shaped indexer case
static float key_to_float(uint32_t k) {  // inverse of host_order_key (NaN keys come out as NaN floats)
    const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void edge_cases() {
    const bool do_topk = !getenv("EDGES_TOPK") || atoi(getenv("EDGES_TOPK")), do_idx = !getenv("EDGES_IDX") || atoi(getenv("EDGES_IDX"));
    if (do_topk) {
        auto T = [](const char* name, std::function<float(int, int64_t)> g, std::vector<int64_t> N0s, std::vector<int> Ss, int m, int K) {
            if (getenv("EDGES_SEL") && !strstr(name, getenv("EDGES_SEL"))) return;  // EDGES_SEL=text: those cases only
            printf("[%s] ", name);
            topk_gen = std::move(g);
            topk_case(N0s, Ss, m, K, 0, true);
            topk_gen = nullptr;
        };
        auto pick = [](std::initializer_list<float> l) { return *(l.begin() + rng() % l.size()); };
        // all keys equal: every pass crosses in one bin, ties everywhere; K = avail - 1, K + 1 .. K + 3 available
        T("all equal", [](int, int64_t) { return 1.f; }, {999}, {3}, 1, 512);
        T("all equal K=avail-1", [](int, int64_t) { return -2.5f; }, {700}, {1}, 1, 700);
        T("all equal K=1", [](int, int64_t) { return 0.f; }, {300}, {2}, 1, 1);
        // every key NaN: key 0, crossing at bin 0 in all four passes
        T("all NaN", [](int, int64_t) { return NAN; }, {600}, {3}, 1, 511);
        T("all NaN K=1", [](int, int64_t) { return NAN; }, {256}, {2}, 1, 1);
        T("NaN but one", [](int, int64_t e) { return e == 417 ? -INFINITY : NAN; }, {600}, {1}, 1, 1);
        T("NaN but K-1", [](int, int64_t e) { return e % 3 == 0 ? (float)e : NAN; }, {900}, {2}, 1, 400);
        // keys that differ only in the lowest byte (passes 0-2 one bin each)
        T("low byte only", [](int, int64_t) { return key_to_float(0xC0A0B000u | (uint32_t)(rng() & 0xff)); }, {2000}, {2}, 1, 300);
        T("low byte only K=1", [](int, int64_t) { return key_to_float(0xC0A0B000u | (uint32_t)(rng() & 0xff)); }, {2000}, {1}, 1, 1);
        T("low byte only K=256", [](int, int64_t) { return key_to_float(0x3F00FF00u | (uint32_t)(rng() & 0xff)); }, {1000}, {1}, 1, 256);
        T("low byte 0/255", [](int, int64_t) { return key_to_float(0xC0FFFF00u | (rng() & 1 ? 0xffu : 0u)); }, {1500}, {2}, 1, 700);
        // -0 / +0 mixes (equal keys), a few +-1
        T("+-0", [&](int, int64_t) { return pick({0.f, -0.f, 0.f, -0.f, 1.f, -1.f}); }, {1200}, {3}, 1, 500);
        T("+-0 only", [&](int, int64_t) { return pick({0.f, -0.f}); }, {800}, {1}, 1, 799);
        // +-inf, NaN and few finite values
        T("inf", [&](int, int64_t) { return pick({INFINITY, -INFINITY, NAN, 3.f, -INFINITY, INFINITY}); }, {1000}, {3}, 1, 333);
        T("inf K=1", [&](int, int64_t) { return pick({-INFINITY, NAN, FLT_MAX, -FLT_MAX}); }, {1000}, {1}, 1, 1);
        // subnormals of both signs and zeros
        T("denormals", [&](int, int64_t) { uint32_t u = (uint32_t)(rng() % 0x800000u) | (rng() & 1 ? 0x80000000u : 0u); float f; memcpy(&f, &u, 4); return f; }, {3000}, {2}, 1, 512);
        T("denormals tiny", [&](int, int64_t) { uint32_t u = (uint32_t)(rng() % 4) | (rng() & 1 ? 0x80000000u : 0u); float f; memcpy(&f, &u, 4); return f; }, {1000}, {2}, 1, 600);
        // bytes at lane boundaries (bins 0, 1, 7, 8, 247, 248, 254, 255) in every pass
        T("lane edges", [](int, int64_t) {
            static const uint32_t b[] = {0, 1, 7, 8, 247, 248, 254, 255};
            return key_to_float(b[rng() % 8] << 24 | b[rng() % 8] << 16 | b[rng() % 8] << 8 | b[rng() % 8]); }, {4000}, {3}, 1, 512);
        for (int K : {1, 2, 255, 256, 257, 1000})
            T("lane edges K", [](int, int64_t) {
                static const uint32_t b[] = {0, 7, 8, 248, 255};
                return key_to_float(0x80000000u | b[rng() % 5] << 16 | b[rng() % 5] << 8 | b[rng() % 5]); }, {2000}, {1}, 1, K);
        // bin 255 crossings (keys C0 FF FF xx), bin 0 crossings (-FLT_MAX / -inf among NaN)
        T("bin 255", [](int, int64_t) { return key_to_float(0xC0FFFF00u | (0xf8u + (uint32_t)(rng() % 8))); }, {1000}, {2}, 1, 100);
        T("bin 0", [&](int, int64_t) { return pick({NAN, NAN, -INFINITY, -FLT_MAX}); }, {1000}, {2}, 1, 600);
        // exactly K, K - 1 or K + 1 keys in lane 0's bins (255..248) at pass 0: the crossing at a lane's last bin or the
        // next lane's first
        for (int K : {64, 300})
            T("lane 0 holds ~K", [K](int r, int64_t e) {
                const int64_t hi = K + (r % 3) - 1;
                return key_to_float(e < hi ? (0xF8000000u + (uint32_t)(rng() % 0x07800000u)) : (0x80000000u | (uint32_t)(rng() % 0x77ffffffu))); },
              {2000}, {3}, 1, K);
        for (int K : {64, 300})  // the same, in pass 1 (the same top byte)
            T("pass 1 lane edge", [K](int r, int64_t e) {
                const int64_t hi = K + (r % 3) - 1;
                const bool top = e % 2 && e < 2 * hi;  // hi keys with byte 2 in F8..FF (lane 0 of pass 1), the rest below
                return key_to_float(0xC1000000u | (top ? 0x00F80000u | (uint32_t)(rng() & 0x0007ffffu) : (uint32_t)(rng() % 0x00F80000u))); },
              {3000}, {3}, 1, K);
        // the K-th largest the smallest key of its bin, and in bin 0 of the next pass (pass 1, 3): the crossing at lane
        // 31's last bin with krem equal to every candidate (no lane but 31 may match; a stale bin_sh would be read)
        for (int K : {1, 64, 300})
            for (int pass : {1, 3})
                T("K-th in bin 0", [K, pass](int, int64_t e) {
                    // the K keys in bin C1 (not a lane's last bin), the rest below, some in C0: pass 0 crosses inside lane 7
                    if (e >= K) return key_to_float(0x80000000u | (uint32_t)(rng() % 0x40ffffffu));
                    if (pass == 1) return key_to_float(0xC1000000u | (e == K / 2 ? 0u : (1u + (uint32_t)(rng() % 255)) << 16) | (uint32_t)(rng() & 0xffff));
                    return key_to_float(0xC1A0B000u | (e == K / 2 ? 0u : 1u + (uint32_t)(rng() % 255))); },
                  {1500}, {2}, 1, K);
        // whole compaction rounds of 256 keys above the threshold (the low 16-bit count at 256) and of 256 at it
        for (int K : {257, 513, 600})
            T("rounds above", [](int, int64_t e) { return e < 512 ? 5.f : (e < 1024 ? 4.f : (float)(rng() % 4)); }, {1500}, {2}, 1, K);
        // ties straddling the threshold: few distinct values
        for (int K : {1, 17, 255, 256, 511, 512, 1023})
            T("ties", [&](int, int64_t) { return pick({1.f, 2.f, 3.f, 2.f, 2.f}); }, {1300}, {2}, 1, K);
        T("ties at end", [](int, int64_t e) { return e >= 1000 ? 5.f : 1.f; }, {1100}, {2}, 1, 50);
        // rows of one launch with different avail: some at K (skipped), some just above
        T("avail ~K m4", [](int, int64_t) { return std::round((float)gauss() * 2.f); }, {4 * 512 - 1}, {8}, 4, 512);
        T("avail K+1..K+8", [](int, int64_t) { return (float)(rng() % 5); }, {512}, {8}, 1, 512);
        // several sequences in one launch (topk_seqs_kernel), different avail, one below K
        T("seqs", [](int, int64_t) { return std::round((float)gauss() * 3.f) / 3.f; }, {1000, 100, 2500}, {3, 2, 4}, 1, 512);
        T("seqs NaN/eq", [&](int, int64_t) { return pick({NAN, 1.f, 1.f, -0.f}); }, {700, 513, 1200}, {2, 1, 3}, 1, 512);
        // a row over 65535 keys, most equal: K and the counts above 16 bits
        T("70k ties", [&](int, int64_t e) { return e % 1000 == 0 ? 2.f : 1.f; }, {70000}, {1}, 1, 66000);
    }
    if (do_idx && getenv("EDGES_IDX_QUICK")) {  // one V4-shaped case, finite and with FLT_MAX / inf / NaN rows
        for (int mode : {1, 2}) {
            idx_qmode = mode;
            indexer(64, 128, 515, 3, 4, 128);
            fflush(stdout);
        }
        idx_qmode = 0;
    } else if (do_idx) {
        for (int mode : {0, 1, 2}) {
            idx_qmode = mode;
            indexer(16, 16, 100, 9, 4, 4);
            indexer(32, 32, 70, 8, 1, 64);
            indexer(48, 64, 600, 5, 4, 140);
            indexer(64, 128, 515, 8, 4, 128);   // avail 129..130: just above K
            indexer(64, 96, 64 * 4 - 1, 8, 4, 64);  // rows 0-3 at K (not scored), 4-7 at K + 1
            indexer(16, 128, 300, 8, 1, 300);  // S 8, row 0 at avail 301
        }
        idx_qmode = 0;
    }
}

int main() {
    if (getenv("EDGES_ONLY")) {
        edge_cases();
        fails += std::exchange(emu_smem_overruns, 0);
        printf("%s: %d failures (EDGES_ONLY)\n", fails ? "FAILED" : "OK", fails);
        return fails ? 1 : 0;
    }
    if (getenv("LEAN_ONLY")) {
        // the lean instance at the edges of sk::sm_lean's conditions (LEAN_SHAPE=N: case N only)
        setenv("DS4J_SKINNY_SMEM", "1", 1);
        lean_sweep = true;
        tight_mats = true;
        const int only = getenv("LEAN_SHAPE") ? atoi(getenv("LEAN_SHAPE")) : -1;
        for (int fmt : {DS4J_FMT_FP8_E4M3_B128, DS4J_FMT_BF16}) {
            if (!fmt_on(fmt)) continue;
            const int k = fmt == DS4J_FMT_FP8_E4M3_B128 ? 64 : 32;  // columns of one chunk group
            int id = 0;
            auto c = [&](auto... args) { if (only < 0 || only == id) skinny_dense(fmt, args...); id++; };
            for (int S = 1; S <= 8; S++) c(64, 0, 64, 3 * k, 16, S, 0);     // groups of one tile, xgs, odd chunk groups
            c(256, 112, 32, 2 * k, 16, 3, 4);          // tiles on both sides of a scale block boundary
            c(256, 240, 16, k, 16, 2, 0);              // the matrix's last tile, one chunk group
            c(320, 16, 272, 5 * k, 272, 4, 0, true);   // 17 tiles: a last row group of one tile, big scales
            c(336, 80, 144, 7 * k, 48, 5, 0, true);    // three groups of 48 from row 80, big scales
            c(48, 0, 48, 65 * k, 48, 1, 0);            // a long row: many slices of each size
            c(48, 0, 48, 65 * k, 48, 8, 0);
            c(16, 0, 16, k, 16, 1, 0);                 // barely: one tile, one chunk group
            c(64, 32, 32, 9 * k, 32, 7, 4, true);
        }
        fails += std::exchange(emu_smem_overruns, 0);
        printf("%s: %d failures (lean edge cases, %d lean runs)\n", fails ? "FAILED" : "OK", fails, lean_runs);
        return fails ? 1 : 0;
    }
    if (getenv("FP8_EDGE")) {
        // FP8 skinny products with x far below the F16 range (fp8_x's lower limit of e, F32 subnormal groups) and
        // block scale bytes 0 (2^-127, an F32 subnormal), 1 and 200 (SKINNY_FMT=N: weight format N instead)
        setenv("DS4J_SKINNY_SMEM", "1", 1);
        abs_floor = 0;
        const int f = getenv("SKINNY_FMT") ? atoi(getenv("SKINNY_FMT")) : DS4J_FMT_FP8_E4M3_B128;
        for (double s : {0x1p-90, 0x1p-100, 0x1p-112, 0x1p-120, 0x1p-128, 0x1p-135}) {
            x_scale = s;
            printf("x times %g\n", s);
            skinny_dense(f, 75, 0, 75, 80, 75, 5, 4);
        }
        x_scale = 1;
        for (int sc : {0, 1, 200}) {
            fixed_fp8_scale = sc;
            printf("scale byte %d\n", sc);
            skinny_dense(f, 75, 0, 75, 80, 75, 5, 4);
        }
        fixed_fp8_scale = -1;
        fails += std::exchange(emu_smem_overruns, 0);
        printf("%s: %d failures (FP8 edge cases)\n", fails ? "FAILED" : "OK", fails);
        return fails ? 1 : 0;
    }
    if (getenv("TC_EDGE")) {
        // the prefill GEMM's FP8 and FP4 decoding at every kind of scale byte: the previous GEMM's bits
        edge_scales = true;
        for (int fmt : {DS4J_FMT_FP8_E4M3_B128, DS4J_FMT_FP4_E2M1_B32}) {
            // FP8: 5 x 4 scale blocks
            if (fmt == DS4J_FMT_FP8_E4M3_B128) dense(fmt, 600, 0, 600, 512, 600, 40, 4);
            else dense(fmt, 300, 0, 260, 224, 260, 70, 4);
            moe(fmt, 5, 2, 40, 72, 64, false, false);
        }
        fails += std::exchange(emu_smem_overruns, 0);
        printf("%s: %d failures (prefill GEMM, edge scales)\n", fails ? "FAILED" : "OK", fails);
        return fails ? 1 : 0;
    }
    if (getenv("COMP_ONLY") || !getenv("TC_ONLY")) {  // the compressor pooling (COMP_ONLY=1: only these)
        compress_case(64, 16, 1, 40, 30, 32, 16);    // 8 row groups per channel's maximum, 2 row chunks, ring + fresh rows
        compress_case(640, 4, 1, 6, 13, 8, 64);      // more channels than threads, chunks of 7 rows
        compress_case(128, 128, 0, 100, 60, 128, 64); // HCA-like: one 128-row window, 8 chunks
        compress_case(96, 8, 1, 0, 20, 0, 32);       // no ring (N0 = 0)
        compress_case(8, 4, 1, 10, 9, 8, 4);         // narrow rows: more row groups than a chunk's rows
        compress_case(1024, 4, 0, 5, 9, 4, 64);      // the widest row (POOL_MAX_W)
        if (getenv("COMP_ONLY")) {
            fails += std::exchange(emu_smem_overruns, 0);
            printf("%s: %d failures (compressor pooling only)\n", fails ? "FAILED" : "OK", fails);
            return fails ? 1 : 0;
        }
    }
    if (getenv("TC_ONLY")) goto prefill;  // the prefill GEMM cases only (tensor-core dense and routed-expert products)
    if (getenv("SPLIT_ONLY")) goto split;  // the split FFMA attention cases only (with output hashes to compare builds)
    if (getenv("MOE_ONLY")) goto moe;     // the skinny routed-expert cases of the grid and row-group variants only
    if (getenv("ATT_ONLY")) goto att;     // the F16-operand (tensor-core) attention cases only
    if (getenv("TOPK_ONLY")) goto topk;   // the Lightning Indexer's top-k cases only
    if (getenv("IDX_ONLY")) goto idx;     // the Lightning Indexer's score cases only
    // the row-wise kernels (norm.cpp, mhc.cpp, moe_routing.cpp): split mHC, register RMSNorm and ranking router against the one-block kernels
    mhc::run_all();
    if (getenv("MHC_ONLY")) {
        fails += std::exchange(emu_smem_overruns, 0);
        printf("%s: %d failures (row-wise kernels only)\n", fails ? "FAILED" : "OK", fails);
        return fails ? 1 : 0;
    }
    setenv("DS4J_SKINNY_SMEM", "1", 1);  // sk::sm_plan for every S (the driver forces its split and slices)
    // skinny products (decode, verify): every format and pass width, rows not whole tiles, column tails, FP8 row views
    // inside the block grid, groups ending inside a tile, few rows of many columns (several warps per row tile)
    for (int fmt : {DS4J_FMT_BF16, DS4J_FMT_F16, DS4J_FMT_FP8_E4M3_B128, DS4J_FMT_FP4_E2M1_B32}) {
        if (!fmt_on(fmt)) continue;
        const int cols = fmt == DS4J_FMT_FP4_E2M1_B32 ? 160 : 80;
        for (int S : {1, 2, 5, 8, 9, 17, 31}) skinny_dense(fmt, 75, 0, 75, cols, 75, S, 4);
        skinny_dense(fmt, 300, 130, 130, cols, 130, 5, 0);
        skinny_dense(fmt, 120, 0, 3 * 40, cols, 40, 9, 8);
        skinny_dense(fmt, 20, 0, 20, fmt == DS4J_FMT_FP4_E2M1_B32 ? 4096 : 2048, 20, 3, 0);
        if (fmt == DS4J_FMT_FP8_E4M3_B128 || fmt == DS4J_FMT_BF16) {
            // the lean instance's shapes (whole 16-row tiles in one scale block, whole chunk groups): one group and
            // two, a view from row 16 and from row 144 (inside the second scale block), a long row in several slices
            for (int S : {1, 3, 8}) skinny_dense(fmt, 256, 0, 256, 512, 256, S, 4);
            skinny_dense(fmt, 256, 0, 256, 256, 128, 5, 0);
            skinny_dense(fmt, 320, 16, 288, 256, 144, 2, 0, true);
            skinny_dense(fmt, 320, 144, 160, 192, 160, 1, 4);
            skinny_dense(fmt, 32, 0, 32, 4096, 32, 4, 0);
        }
        if (fmt == DS4J_FMT_FP8_E4M3_B128 || fmt == DS4J_FMT_FP4_E2M1_B32) skinny_dense(fmt, 40, 0, 40, cols, 40, 17, 0, true);
        // the many-row-tile variant (MT_HI m-tiles per warp), which the shapes above are too small to choose
        const int hi = fmt == DS4J_FMT_FP4_E2M1_B32 ? 4 : 2;
        for (int S : {1, 9, 31}) skinny_dense(fmt, 75, 0, 75, cols, 75, S, 4, false, hi);
        skinny_dense(fmt, 300, 130, 130, cols, 130, 5, 0, false, hi);
        skinny_dense(fmt, 120, 0, 3 * 40, cols, 40, 9, 8, false, hi);
        // 33 .. 64 rows: one 64-token pass (DS4J_SKINNY_WIDE_MT m-tiles per warp), or passes of 32 with
        // DS4J_SKINNY_WIDE=0; every row alone must give the same bits as inside the step
        for (int S : {32, 33, 47, 64}) skinny_dense(fmt, 75, 0, 75, cols, 75, S, 4);
        skinny_dense(fmt, 300, 130, 130, cols, 130, 40, 0);
        skinny_dense(fmt, 120, 0, 3 * 40, cols, 40, 64, 8);
        skinny_dense(fmt, 20, 0, 20, fmt == DS4J_FMT_FP4_E2M1_B32 ? 4096 : 2048, 20, 64, 0);
        if (fmt == DS4J_FMT_FP8_E4M3_B128 || fmt == DS4J_FMT_FP4_E2M1_B32) skinny_dense(fmt, 40, 0, 40, cols, 40, 57, 0, true);
        skinny_dense(fmt, 75, 0, 75, cols, 75, 64, 4, false, hi);
        // rows past the F16 range and far below it (every format; FP8 scales x per group)
        wide_x = true;
        for (int S : {1, 5, 40}) skinny_dense(fmt, 75, 0, 75, cols, 75, S, 4);
        skinny_dense(fmt, 40, 0, 40, cols, 40, 17, 0, fmt == DS4J_FMT_FP8_E4M3_B128 || fmt == DS4J_FMT_FP4_E2M1_B32);
        wide_x = false;
    }
moe:
    // steps of 1 and 5 rows, which DS4J_SKINNY_WIDE and DS4J_SKINNY_WIDE_MT (33 .. 64 rows) leave as they are: run.sh's
    // reruns with those set skip these slow cases
    if (!getenv("DS4J_SKINNY_WIDE") && !getenv("DS4J_SKINNY_WIDE_MT")) {
        // row groups per block (300 rows: three of 128) and the grid over distinct experts at the formats the model stores
        for (int fmt : {DS4J_FMT_FP8_E4M3_B128, DS4J_FMT_FP4_E2M1_B32}) {
            if (!fmt_on(fmt)) continue;
            skinny_moe_case(fmt, 6, 3, 1, 300, fmt == DS4J_FMT_FP4_E2M1_B32 ? 512 : 256, false, false, -1);
            skinny_moe_case(fmt, 6, 3, 5, 300, fmt == DS4J_FMT_FP4_E2M1_B32 ? 512 : 256, true, false, 2);
        }
        // one expert takes all 15 picks (two passes of 8) over two row groups of 144 rows with two chunk groups per
        // partition (two slices at sl = 1): a block's second row group must stage again each pass and slice
        if (fmt_on(DS4J_FMT_FP4_E2M1_B32)) skinny_moe_case(DS4J_FMT_FP4_E2M1_B32, 2, 3, 5, 144, 1024, false, false, -1);
    }
    if (getenv("MOE_ONLY")) {
        fails += std::exchange(emu_smem_overruns, 0);
        printf("%s: %d failures (skinny routed experts only)\n", fails ? "FAILED" : "OK", fails);
        return fails ? 1 : 0;
    }
    for (int fmt : {DS4J_FMT_BF16, DS4J_FMT_F16, DS4J_FMT_FP8_E4M3_B128, DS4J_FMT_FP4_E2M1_B32}) {
        if (!fmt_on(fmt)) continue;
        const int cols = fmt == DS4J_FMT_FP4_E2M1_B32 ? 128 : 64;
        skinny_moe_case(fmt, 6, 3, 17, 72, cols, false, fmt != DS4J_FMT_FP8_E4M3_B128, 2);
        skinny_moe_case(fmt, 5, 2, 5, 40, cols, true, false, -1);
        skinny_moe_case(fmt, 6, 3, 9, 72, cols, false, true, 2, fmt == DS4J_FMT_FP4_E2M1_B32 ? 4 : 2);
        wide_x = true;
        skinny_moe_case(fmt, 5, 2, 5, 40, cols, true, false, -1);
        wide_x = false;
    }
    if (fmt_on(DS4J_FMT_FP4_E2M1_B32))
        skinny_moe_case(DS4J_FMT_FP4_E2M1_B32, 3, 3, 31, 40, 64, false, false, -1);  // experts with > 32 picks: two passes
    // 33 .. 64 tokens: 64-pick passes; experts with more than 64 picks (two passes)
    for (int fmt : {DS4J_FMT_BF16, DS4J_FMT_F16, DS4J_FMT_FP8_E4M3_B128, DS4J_FMT_FP4_E2M1_B32}) {
        if (!fmt_on(fmt)) continue;
        const int cols = fmt == DS4J_FMT_FP4_E2M1_B32 ? 128 : 64;
        skinny_moe_case(fmt, 6, 3, 64, 72, cols, false, fmt != DS4J_FMT_FP8_E4M3_B128, 2);
        skinny_moe_case(fmt, 5, 2, 40, 40, cols, true, false, -1, fmt == DS4J_FMT_FP4_E2M1_B32 ? 4 : 2);
    }
    if (fmt_on(DS4J_FMT_FP4_E2M1_B32)) skinny_moe_case(DS4J_FMT_FP4_E2M1_B32, 3, 3, 64, 40, 64, false, false, -1);
    if (getenv("SKINNY_ONLY")) {
        fails += std::exchange(emu_smem_overruns, 0);
        printf("%s: %d failures (skinny products only)\n", fails ? "FAILED" : "OK", fails);
        return fails ? 1 : 0;
    }

prefill:
    // dense: odd rows, K tails, token tails, row views (FP8 grid offsets), groups straddling tiles
    for (int fmt : {DS4J_FMT_BF16, DS4J_FMT_F16, DS4J_FMT_FP8_E4M3_B128, DS4J_FMT_FP4_E2M1_B32}) {
        int cols = fmt == DS4J_FMT_FP4_E2M1_B32 ? 96 : 80;
        dense(fmt, 200, 0, 200, cols, 200, 70, 4);
        dense(fmt, 300, 130, 150, cols, 150, 33, 0);
        dense(fmt, 300, 0, 3 * 96, cols, 96, 40, 8);
        dense(fmt, 300, 0, 260, fmt == DS4J_FMT_FP4_E2M1_B32 ? 224 : 208, 260, 130, 4);  // several column tiles
        // seven column tiles: the deeper kernel's register ring wraps (D 4 or 2) and ends inside it
        dense(fmt, 200, 0, 200, fmt == DS4J_FMT_FP4_E2M1_B32 ? 416 : 400, 200, 20, 4);
    }
    for (int fmt : {DS4J_FMT_BF16, DS4J_FMT_FP8_E4M3_B128, DS4J_FMT_FP4_E2M1_B32})
        moe(fmt, 5, 2, 20, 72, fmt == DS4J_FMT_FP4_E2M1_B32 ? 416 : 400, false, false);
    for (int fmt : {DS4J_FMT_BF16, DS4J_FMT_FP8_E4M3_B128, DS4J_FMT_FP4_E2M1_B32}) {
        moe(fmt, 5, 2, 40, 72, 64, false, false);
        moe(fmt, 5, 3, 40, 72, 64, true, true);
    }
    moe(DS4J_FMT_F16, 4, 2, 37, 130, 32, false, true);
    if (getenv("TC_ONLY")) {
        fails += std::exchange(emu_smem_overruns, 0);
        printf("%s: %d failures (prefill GEMM only)\n", fails ? "FAILED" : "OK", fails);
        return fails ? 1 : 0;
    }
    if (getenv("EXTRA")) {
        moe(DS4J_FMT_FP4_E2M1_B32, 300, 2, 40, 64, 64, false, false);
        indexer(16, 32, 4300, 40, 4, 64);
    }
idx:
    indexer(16, 32, 0, 40, 4, 4);
    indexer(16, 64, 200, 45, 4, 32);
    indexer(64, 128, 1000, 5, 4, 100);
    indexer(48, 16, 3000, 7, 8, 300);
    indexer(64, 128, 4095, 1, 4, 512);  // a decode step at 4,096 tokens in V4's shapes (H_I 64, d_I 128, top 512)
    if (getenv("IDX_ONLY")) {
        fails += std::exchange(emu_smem_overruns, 0);
        printf("%s: %d failures (indexer scores only)\n", fails ? "FAILED" : "OK", fails);
        return fails ? 1 : 0;
    }
att:
    attention(16, 64, DS4J_ATTN_SLIDING, 0, 4, 30, 3, 1, 1.0);   // ring wrapped, this step's rows
    attention(80, 64, DS4J_ATTN_HCA, 4, 8, 100, 3, 2, 1.0);      // two head blocks (rows past H), two key ranges
    attention(8, 128, DS4J_ATTN_CSA, 4, 40, 300, 5, 3, 3.0);     // CSA selections, sharp softmax
    attention(20, 64, DS4J_ATTN_HCA, 2, 8, 200, 2, 4, 8.0);      // very sharp softmax over four key ranges
    attention(64, 512, DS4J_ATTN_HCA, 2, 8, 60, 2, 1, 1.0);      // the V4 shape, one key range
    attention(24, 64, DS4J_ATTN_HCA, 2, 8, 30, 6, 2, 1.0);       // queries of one and of two key ranges in one step
    attention(64, 512, DS4J_ATTN_HCA, 2, 8, 1200, 2, 20, 1.0);   // the V4 shape, 20 key ranges: the combine's groups of 8 and a tail
    // several sequences on the f16 path: long and short queries in one step and in one sequence, several key ranges
    tc_attention_seqs(20, 64, DS4J_ATTN_HCA, 2, 0, 16, {0, 70, 46, 200}, {3, 1, 5, 2}, 40, 4);
    tc_attention_seqs(24, 64, DS4J_ATTN_CSA, 4, 20, 16, {300, 10, 150, 69}, {5, 2, 1, 4}, 33, 3);
    tc_attention_seqs(64, 512, DS4J_ATTN_HCA, 4, 0, 16, {120, 30}, {2, 1}, 40, 2);
    tc_attention_seqs(70, 256, DS4J_ATTN_CSA, 2, 40, 16, {40, 3, 90}, {1, 2, 3}, 20, 3);  // D 256, heads past H
    tc_attention_seqs(64, 512, DS4J_ATTN_HCA, 2, 0, 16, {1200, 300, 5}, {2, 1, 2}, 40, 20);  // 20, 6 and 1 ranges, one launch
    if (getenv("ATT_ONLY")) {
        fails += std::exchange(emu_smem_overruns, 0);
        printf("%s: %d failures (F16-operand attention only)\n", fails ? "FAILED" : "OK", fails);
        return fails ? 1 : 0;
    }
    // split FFMA attention: one key range and several, a range count past AT_NS_MAX tiles (ranges of two tiles), heads
    // past H, odd widths (scalar loads, one output column per thread), a dominant sink
split:
    split_attention(SplitCase{20, 40, DS4J_ATTN_SLIDING, 0, 0, 16, 30, 5, 1.0, 1.0});     // ring wrapped, one range
    split_attention(SplitCase{16, 36, DS4J_ATTN_HCA, 2, 0, 16, 90, 5, 1.0, 1.0});         // odd width, two ranges
    split_attention(SplitCase{24, 64, DS4J_ATTN_CSA, 4, 40, 16, 300, 5, 3.0, 1.0});       // CSA selections, sharp
    split_attention(SplitCase{16, 72, DS4J_ATTN_HCA, 1, 0, 16, 1070, 1, 1.0, 1.0});       // decode, 34 tiles: 17 ranges
    split_attention(SplitCase{16, 64, DS4J_ATTN_HCA, 1, 0, 8, 1013, 5, 2.0, 30.0});       // the 32 / 33 tile edge, big sinks
    split_attention(SplitCase{64, 512, DS4J_ATTN_HCA, 4, 0, 16, 120, 2, 1.0, 1.0});       // the V4 shape, 4 head groups
    split_attention(SplitCase{17, 300, DS4J_ATTN_CSA, 2, 24, 16, 100, 3, 1.0, 1.0});      // 300 columns: some threads 2
    split_attention_seqs(20, 40, DS4J_ATTN_HCA, 2, 0, 16, {0, 70, 5, 200}, {3, 1, 5, 2});
    split_attention_seqs(16, 64, DS4J_ATTN_CSA, 4, 20, 16, {300, 10, 150}, {5, 2, 1});
    // last, so that the cases above keep their inputs (one random stream) and their output hashes
    split_attention(SplitCase{16, 38, DS4J_ATTN_HCA, 2, 0, 16, 90, 3, 1.0, 1.0});  // width not a multiple of 4: the combine's scalar path
    if (getenv("SPLIT_ONLY")) {
        fails += std::exchange(emu_smem_overruns, 0);
        printf("%s: %d failures (split attention only)\n", fails ? "FAILED" : "OK", fails);
        return fails ? 1 : 0;
    }
topk:
    // top-k: chunk edges, picks spanning chunks, every key equal, few distinct values (ties at the threshold, NaN,
    // -0 / +0, infinities), rows of 300K entries (1.2M tokens at m = 4), several sequences in one launch
    topk_case({4 * 5000}, {3}, 4, 512, 1, true);
    topk_case({4 * 4100}, {1}, 4, 1000, 2, true);
    topk_case({4 * 7000}, {2}, 4, 3000, 3, true);
    topk_case({4 * 2048 - 1}, {2}, 4, 512, 0, true);
    topk_case({4 * 300000}, {1}, 4, 512, 0, true);
    topk_case({4 * 300000}, {2}, 4, 512, 3, false);
    topk_case({4 * 5000, 40, 4 * 9000}, {2, 3, 5}, 4, 512, 3, false);
    // the one-block kernel's bin search by one warp (topk_bin) and its one scan of both counts: a decode step's row at
    // 4,096 tokens in every distribution, K one short of the row, K = 1, bins crossed at 0 and at 255
    for (int d = 0; d < 4; d++) topk_case({4 * 1024 - 1}, {1}, 4, 512, d, true);
    topk_case({4 * 513 - 1}, {3}, 4, 512, 1, true);
    topk_case({4 * 900}, {2}, 4, 1, 3, true);
    topk_case({4 * 700}, {2}, 4, 699, 2, true);
    fails += std::exchange(emu_smem_overruns, 0);
    printf("%s: %d failures\n", fails ? "FAILED" : "OK", fails);
    return fails ? 1 : 0;
}
