// Emulated runs of the row-wise kernels of norm.cpp, mhc.cpp and moe_routing.cpp (included by driver.cpp): the split
// mHC kernels (a row's columns over many blocks, the row's RMSNorm by its last block), the register RMSNorm and the
// ranking router must give the bits of the one-block kernels they replace, for every finishing variant (REG 16 / 64 /
// loop); a row computed alone (decode) must give the bits of the same row inside a step of several rows (verify,
// prefill); the arrival counters must be back at zero after every launch.
#pragma once

namespace mhc {

static std::vector<float> gvec(size_t n, double sd) {
    std::vector<float> v(n);
    for (auto& x : v) x = (float)(gauss() * sd);
    return v;
}

/**
 * REG of the launch's own choice, plus the loop form (0) where the launch is small enough to emulate twice (the loop
 * finisher is otherwise covered by the rows above 64 * 256 values and the steps of many rows).
 */
static std::vector<int> regs_for(int S, int64_t n, int blocks) {
    std::vector<int> r{hc_reg_for(S, n)};
    if (r[0] != 0 && S * blocks <= 24) r.push_back(0);
    return r;
}

/** Rows to compute alone: the first and the last. */
static std::vector<int> alone_rows(int S) { return S == 1 ? std::vector<int>{0} : std::vector<int>{0, S - 1}; }

/** Elements whose bits differ; prints the first few as a failure of what. */
static int differ(const char* what, const float* want, const float* got, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&want[i], &got[i], 4) != 0) {
            if (bad < 3 && fails < 40) printf("FAIL %s: element %zu of %zu: want %.9g, got %.9g\n", what, i, n, want[i], got[i]);
            bad++;
        }
    if (bad) fails++;
    return bad;
}

static void counters_zero(const char* what, const std::vector<unsigned>& c) {
    for (size_t i = 0; i < c.size(); i++)
        if (c[i] != 0) {
            printf("FAIL %s: counter %zu is %u after the launch\n", what, i, c[i]);
            fails++;
            return;
        }
}

/** hc_pre_split_kernel<reg> over S rows with cols columns a collapse block (grid B + 1 by S). */
static void pre_split(int reg, int cols, const float* mu, const float* base, const float* scale, const float* X, int S, int n,
                      int D, int iters, float eps, float* post, float* comb, float* col, int norm, const float* w, float reps,
                      std::vector<unsigned>& cnt) {
    dim3 grid((D + cols - 1) / cols + 1, S);
    emu_launch(grid, dim3(HC_THREADS), 0, [&] {
        if (reg == 16) hc_pre_split_kernel<16>(mu, base, scale, X, n, D, iters, eps, post, comb, col, norm, w, reps, cnt.data(), cols);
        else if (reg == 64) hc_pre_split_kernel<64>(mu, base, scale, X, n, D, iters, eps, post, comb, col, norm, w, reps, cnt.data(), cols);
        else hc_pre_split_kernel<0>(mu, base, scale, X, n, D, iters, eps, post, comb, col, norm, w, reps, cnt.data(), cols);
    });
}

static void hc_pre_case(int S, int n, int D, bool norm, bool weighted) {
    const int mix = (2 + n) * n, iters = 20;
    const float eps = 1e-6f, reps = 1e-6f;
    auto mu = gvec((size_t)S * mix, 1), base = gvec(mix, 0.5), scale = gvec(3, 1), X = gvec((size_t)S * n * D, 1);
    auto w = gvec(D, 1);
    const float* wp = weighted ? w.data() : nullptr;
    std::vector<float> p0(S * n), c0(S * n * n), o0((size_t)S * D);
    emu_launch(dim3(S), dim3(256), 0, [&] {
        hc_pre_kernel(mu.data(), base.data(), scale.data(), X.data(), n, D, iters, eps, p0.data(), c0.data(), o0.data(),
                      norm, wp, reps);
    });
    char at[160];
    int bad = 0;
    // 256 columns a collapse block (decode steps) and 1,024 (hc_cols above 64 rows): the same bits
    for (int reg : regs_for(S, D, (D + HC_COLS - 1) / HC_COLS + 1))
    for (int cols : {HC_COLS, 4 * HC_COLS}) {
        std::vector<float> p1(S * n), c1(S * n * n), o1((size_t)S * D);
        std::vector<unsigned> cnt(S, 0);
        pre_split(reg, cols, mu.data(), base.data(), scale.data(), X.data(), S, n, D, iters, eps, p1.data(), c1.data(),
                  o1.data(), norm, wp, reps, cnt);
        snprintf(at, sizeof at, "hc_pre S %d n %d D %d norm %d weighted %d reg %d cols %d", S, n, D, norm, weighted, reg, cols);
        bad += differ(at, p0.data(), p1.data(), p0.size()) + differ(at, c0.data(), c1.data(), c0.size()) +
               differ(at, o0.data(), o1.data(), o0.size());
        counters_zero(at, cnt);
    }
    // each row alone (a decode step) against the same row of the step
    for (int s : alone_rows(S)) {
        std::vector<float> p1(n), c1(n * n), o1(D);
        std::vector<unsigned> cnt(1, 0);
        pre_split(hc_reg_for(1, D), HC_COLS, mu.data() + (size_t)s * mix, base.data(), scale.data(), X.data() + (size_t)s * n * D, 1, n,
                  D, iters, eps, p1.data(), c1.data(), o1.data(), norm, wp, reps, cnt);
        snprintf(at, sizeof at, "hc_pre row %d alone of S %d n %d D %d norm %d", s, S, n, D, norm);
        bad += differ(at, p0.data() + s * n, p1.data(), n) + differ(at, c0.data() + s * n * n, c1.data(), n * n) +
               differ(at, o0.data() + (size_t)s * D, o1.data(), D);
    }
    printf("hc_pre S %d n %d D %d norm %d weighted %d: split %s the one-block kernel, rows alone too\n", S, n, D, norm,
           weighted, bad ? "DIFFERS FROM" : "bit-identical to");
}

static void post_split(int reg, float* X, const float* f, const int32_t* ids, const float* wts, const float* yr, int k,
                       const float* post, const float* comb, int S, int n, int D, float eps, float* v,
                       std::vector<unsigned>& cnt) {
    dim3 grid((D + HC_COLS - 1) / HC_COLS, S);
    emu_launch(grid, dim3(HC_THREADS), 0, [&] {
        if (reg == 16) hc_post_split_kernel<16>(X, f, ids, wts, yr, k, post, comb, n, D, eps, v, cnt.data());
        else if (reg == 64) hc_post_split_kernel<64>(X, f, ids, wts, yr, k, post, comb, n, D, eps, v, cnt.data());
        else hc_post_split_kernel<0>(X, f, ids, wts, yr, k, post, comb, n, D, eps, v, cnt.data());
    });
}

/** combine: the MoE combination (k picks of E = 16, dup: some picks repeated, as hash routing may give). */
static void hc_post_case(int S, int n, int D, int k, bool combine, bool norm, bool dup) {
    const float eps = 1e-6f;
    const size_t nD = (size_t)n * D;
    auto X = gvec(S * nD, 1), f = gvec((size_t)S * D, 1), post = gvec(S * n, 1), comb = gvec(S * n * n, 0.5);
    auto wts = gvec(S * k, 1), yr = gvec((size_t)S * k * D, 1);
    std::vector<int32_t> ids(S * k);
    for (int s = 0; s < S; s++) {
        int perm[16];
        for (int e = 0; e < 16; e++) perm[e] = e;
        for (int e = 15; e > 0; e--) std::swap(perm[e], perm[rng() % (e + 1)]);
        for (int j = 0; j < k; j++) ids[s * k + j] = dup && j % 3 == 2 ? perm[j - 1] : perm[j];
    }
    const int32_t* ip = combine ? ids.data() : nullptr;
    auto X0 = X;
    std::vector<float> v0(S * nD, -7.f);
    emu_launch(dim3(S), dim3(256), 0, [&] {
        hc_post_norm_kernel(X0.data(), f.data(), ip, wts.data(), yr.data(), k, post.data(), comb.data(), n, D, eps,
                            norm ? v0.data() : nullptr);
    });
    char at[160];
    int bad = 0;
    for (int reg : regs_for(S, nD, (D + HC_COLS - 1) / HC_COLS)) {
        auto X1 = X;
        std::vector<float> v1(S * nD, -7.f);
        std::vector<unsigned> cnt(S, 0);
        post_split(reg, X1.data(), f.data(), ip, wts.data(), yr.data(), k, post.data(), comb.data(), S, n, D, eps,
                   norm ? v1.data() : nullptr, cnt);
        snprintf(at, sizeof at, "hc_post S %d n %d D %d k %d combine %d norm %d dup %d reg %d", S, n, D, k, combine, norm, dup, reg);
        bad += differ(at, X0.data(), X1.data(), X0.size()) + differ(at, v0.data(), v1.data(), v0.size());
        counters_zero(at, cnt);
    }
    for (int s : alone_rows(S)) {
        std::vector<float> X1(X.begin() + s * nD, X.begin() + (s + 1) * nD), v1(nD, -7.f);
        std::vector<unsigned> cnt(1, 0);
        post_split(hc_reg_for(1, nD), X1.data(), f.data() + (size_t)s * D, combine ? ids.data() + s * k : nullptr,
                   wts.data() + s * k, yr.data() + (size_t)s * k * D, k, post.data() + s * n, comb.data() + s * n * n, 1, n, D,
                   eps, norm ? v1.data() : nullptr, cnt);
        snprintf(at, sizeof at, "hc_post row %d alone of S %d n %d D %d combine %d norm %d", s, S, n, D, combine, norm);
        bad += differ(at, X0.data() + s * nD, X1.data(), nD) + differ(at, v0.data() + s * nD, v1.data(), nD);
    }
    printf("hc_post S %d n %d D %d k %d combine %d norm %d dup %d: split %s the one-block kernel, rows alone too\n", S, n, D,
           k, combine, norm, dup, bad ? "DIFFERS FROM" : "bit-identical to");
}

static void hc_head_case(int R, int n, int D) {
    const float eps = 1e-6f;
    auto mu = gvec(R * n, 1), base = gvec(n, 0.5), scale = gvec(1, 1), X = gvec((size_t)R * n * D, 1);
    std::vector<float> y0((size_t)R * D), y1((size_t)R * D);
    emu_launch(dim3(R), dim3(256), 0, [&] { hc_head_kernel(mu.data(), base.data(), scale.data(), X.data(), n, D, eps, y0.data()); });
    emu_launch(dim3((D + HC_COLS - 1) / HC_COLS, R), dim3(HC_THREADS), 0,
               [&] { hc_head_split_kernel(mu.data(), base.data(), scale.data(), X.data(), n, D, eps, y1.data()); });
    char at[96];
    snprintf(at, sizeof at, "hc_head R %d n %d D %d", R, n, D);
    const int bad = differ(at, y0.data(), y1.data(), y0.size());
    printf("%s: split %s the one-block kernel\n", at, bad ? "DIFFERS FROM" : "bit-identical to");
}

static void rmsnorm_case(int rows, int n, bool weighted, bool in_place) {
    auto x = gvec((size_t)rows * n, 2), w = gvec(n, 1);
    x[0] = 0.f;
    const float* wp = weighted ? w.data() : nullptr;
    std::vector<float> y0((size_t)rows * n);
    emu_launch(dim3(rows), dim3(256), 0, [&] { rmsnorm_kernel(x.data(), y0.data(), wp, n, 1e-6f); });
    int bad = 0;
    for (int reg : {16, 64, 0}) {
        if (reg * 256 != 0 && n > reg * 256) continue;
        std::vector<float> xi = x, y1((size_t)rows * n);
        float* out = in_place ? xi.data() : y1.data();
        emu_launch(dim3(rows), dim3(HC_THREADS), 0, [&] {
            if (reg == 16) rmsnorm_ilp_kernel<16>(xi.data(), out, wp, n, 1e-6f);
            else if (reg == 64) rmsnorm_ilp_kernel<64>(xi.data(), out, wp, n, 1e-6f);
            else rmsnorm_ilp_kernel<0>(xi.data(), out, wp, n, 1e-6f);
        });
        char at[96];
        snprintf(at, sizeof at, "rmsnorm rows %d n %d weighted %d in place %d reg %d", rows, n, weighted, in_place, reg);
        bad += differ(at, y0.data(), out, y0.size());
    }
    printf("rmsnorm rows %d n %d weighted %d in place %d: register forms %s rmsnorm_kernel\n", rows, n, weighted, in_place,
           bad ? "DIFFER FROM" : "bit-identical to");
}

/** special: scores with ties, NaNs, signed zeros and infinities. */
static void moe_route_case(int S, int E, int k, bool hash, bool special) {
    const int V = 37;
    auto lam = gvec((size_t)S * E, 2), bias = gvec(E, 0.1);
    if (special) {
        const float pool[] = {0.f, -0.f, NAN, INFINITY, -INFINITY, 1e-30f, 3.f, -40.f, 30.f};
        for (auto& v : lam) if (rng() % 2) v = pool[rng() % 9];
        for (int e = 0; e + 1 < E; e += 5) bias[e + 1] = bias[e];
        bias[E / 2] = -0.f;
    }
    std::vector<int32_t> toks(S), tid2eid(V * k);
    for (auto& t : toks) t = rng() % V;
    for (auto& t : tid2eid) t = rng() % E;  // repeats allowed
    const float* bp = hash ? nullptr : bias.data();
    const int32_t* tp = hash ? tid2eid.data() : nullptr;
    std::vector<int32_t> i0(S * k), i1(S * k);
    std::vector<float> w0(S * k), w1(S * k);
    emu_launch(dim3(S), dim3(128), 2 * E * sizeof(float), [&] {
        moe_route_kernel(lam.data(), bp, tp, toks.data(), E, k, 1.5f, i0.data(), w0.data());
    });
    emu_launch(dim3(S), dim3(128), 2 * E * sizeof(float), [&] {
        moe_route_rank_kernel(lam.data(), bp, tp, toks.data(), E, k, 1.5f, i1.data(), w1.data());
    });
    char at[96];
    snprintf(at, sizeof at, "moe_route S %d E %d k %d hash %d special %d", S, E, k, hash, special);
    int bad = differ(at, w0.data(), w1.data(), w0.size());
    for (int i = 0; i < S * k; i++)
        if (i0[i] != i1[i]) {
            if (bad < 3) printf("FAIL %s: pick %d: want %d, got %d\n", at, i, i0[i], i1[i]);
            bad++;
        }
    if (bad) fails++;
    printf("%s: ranking router %s the serial one\n", at, bad ? "DIFFERS FROM" : "bit-identical to");
}

/**
 * moe_gate_route_kernel (the router in one launch) over S rows of x (row stride ldx) and a gate of E rows in format fmt
 * (F32, F16, BF16): each score within (D / 32 + 6) x 2^-24 of its terms' absolute sum of the double sum, the picks and
 * weights those of moe_route_rank_kernel on the kernel's own scores bit for bit, the first and last rows alone the same
 * bits, the arrival counters back at zero.
 */
static void gate_route_case(int S, int E, int D, int k, int fmt, bool hash, int ldx) {
    const int V = 23, per = fmt == DS4J_FMT_F32 ? 4 : 2;
    std::vector<uint8_t> w((size_t)E * D * per);
    std::vector<double> wv((size_t)E * D);
    for (size_t i = 0; i < wv.size(); i++) {
        const float v = (float)(gauss() * 0.05);
        if (fmt == DS4J_FMT_F32) {
            memcpy(&w[4 * i], &v, 4);
            wv[i] = v;
        } else {
            uint16_t h;
            if (fmt == DS4J_FMT_BF16) {
                uint32_t u;
                memcpy(&u, &v, 4);
                h = (uint16_t)(u >> 16);
                wv[i] = bf16_to_f32(h);
            } else {
                h = f32_to_f16(v);
                wv[i] = f16_to_f32(h);
            }
            memcpy(&w[2 * i], &h, 2);
        }
    }
    auto x = gvec((size_t)S * ldx, 1), bias = gvec(E, 0.1);
    std::vector<int32_t> toks(S), tid2eid(V * k);
    for (auto& t : toks) t = rng() % V;
    for (auto& t : tid2eid) t = rng() % E;
    const float* bp = hash ? nullptr : bias.data();
    const int32_t* tp = hash ? tid2eid.data() : nullptr;
    int epb = GR_EXPERTS;  // experts (warps) a block; 4 below, for the same bits
    const int64_t rb = (int64_t)D * per;
    const size_t smem = (size_t)gate_route_smem(E, D);
    std::vector<unsigned> cnt(DS4J_HC_COUNT_ROWS, 0);
    auto run = [&](int s0, int n, float* lam, int32_t* ids, float* wts) {
        const int nb = (E + epb - 1) / epb;
        emu_launch(dim3(nb, n), dim3(epb * 32), smem, [&] {
            const float* xs = x.data() + (int64_t)s0 * ldx;
            const int32_t* ts = toks.data() + s0;
            if (fmt == DS4J_FMT_F32) moe_gate_route_kernel<DS4J_FMT_F32>(w.data(), rb, E, D, xs, ldx, bp, tp, ts, k, 1.5f, lam, ids, wts, cnt.data());
            else if (fmt == DS4J_FMT_F16) moe_gate_route_kernel<DS4J_FMT_F16>(w.data(), rb, E, D, xs, ldx, bp, tp, ts, k, 1.5f, lam, ids, wts, cnt.data());
            else moe_gate_route_kernel<DS4J_FMT_BF16>(w.data(), rb, E, D, xs, ldx, bp, tp, ts, k, 1.5f, lam, ids, wts, cnt.data());
        });
    };
    std::vector<float> lam((size_t)S * E), wts((size_t)S * k), w1((size_t)S * k);
    std::vector<int32_t> ids((size_t)S * k), i1((size_t)S * k);
    run(0, S, lam.data(), ids.data(), wts.data());
    char at[112];
    snprintf(at, sizeof at, "gate_route S %d E %d D %d k %d fmt %d hash %d ldx %d", S, E, D, k, fmt, hash, ldx);
    counters_zero(at, cnt);
    int bad = 0;
    for (int s = 0; s < S; s++)
        for (int e = 0; e < E; e++) {
            double sum = 0, abs = 0;
            for (int c = 0; c < D; c++) {
                const double t = wv[(size_t)e * D + c] * x[(size_t)s * ldx + c];
                sum += t;
                abs += fabs(t);
            }
            const double bound = (D / 32.0 + 6) * ldexp(1.0, -24) * abs;
            if (!(fabs(lam[(size_t)s * E + e] - sum) <= bound)) {
                if (bad < 3) printf("FAIL %s: score (%d, %d) %.9g against %.9g, bound %.3g\n", at, s, e, lam[(size_t)s * E + e], sum, bound);
                bad++;
            }
        }
    emu_launch(dim3(S), dim3(128), 2 * E * sizeof(float), [&] {
        moe_route_rank_kernel(lam.data(), bp, tp, toks.data(), E, k, 1.5f, i1.data(), w1.data());
    });
    bad += differ(at, w1.data(), wts.data(), wts.size());
    for (int i = 0; i < S * k; i++)
        if (ids[i] != i1[i]) {
            if (bad < 3) printf("FAIL %s: pick %d: want %d, got %d\n", at, i, i1[i], ids[i]);
            bad++;
        }
    for (int s : alone_rows(S)) {
        std::vector<float> l1(E), wa(k);
        std::vector<int32_t> ia(k);
        run(s, 1, l1.data(), ia.data(), wa.data());
        bad += differ(at, lam.data() + (size_t)s * E, l1.data(), E);
        bad += differ(at, wts.data() + (size_t)s * k, wa.data(), k);
        for (int j = 0; j < k; j++) bad += ia[j] != ids[(size_t)s * k + j];
    }
    counters_zero(at, cnt);
    epb = 4;  // blocks of 4 experts: the same bits
    {
        std::vector<float> l4((size_t)S * E), w4((size_t)S * k);
        std::vector<int32_t> i4((size_t)S * k);
        run(0, S, l4.data(), i4.data(), w4.data());
        bad += differ(at, lam.data(), l4.data(), lam.size());
        bad += differ(at, wts.data(), w4.data(), wts.size());
        for (int i = 0; i < S * k; i++) bad += i4[i] != ids[i];
        counters_zero(at, cnt);
    }
    if (bad) fails++;
    if (bad) printf("%s: %d FAILED checks (scores, picks, rows alone or blocks of 4 experts)\n", at, bad);
    else printf("%s: scores within the bound, picks equal to the ranking router's, rows alone and blocks of 4 experts bit-identical\n", at);
}

/**
 * swiglu_parts_kernel on planes of partial sums (gn planes of g, un of u, n values each, strides past n) against
 * skinny_combine's sums (the column-split products' own launch) and swiglu_kernel on them: bit-identical.
 */
static void swiglu_parts_case(int64_t n, int gn, int un, int64_t pad) {
    const float lim = 7.f;
    const int64_t gs = n + pad, us = n + 2 * pad;
    auto g = gvec((size_t)gn * gs, 3), u = gvec((size_t)un * us, 3);
    std::vector<float> gy(n), uy(n), want(n), got(n);
    const int rows = (int)n;  // one "token" of n rows: skinny_combine's plane is ns * rows = n values
    auto sum = [&](const std::vector<float>& part, int nw, int64_t stride, std::vector<float>& y) {
        if (stride == n) {
            emu_launch(dim3((unsigned)((n + 255) / 256)), dim3(256), 0, [&] {
                sk::skinny_combine<1>(part.data(), nw, 1, rows, y.data(), rows, nullptr, nullptr);
            });
        } else {  // planes stride apart: skinny_combine sums planes n apart, so each plane is copied to its place
            std::vector<float> packed((size_t)nw * n);
            for (int p = 0; p < nw; p++) memcpy(&packed[(size_t)p * n], &part[(size_t)p * stride], n * 4);
            emu_launch(dim3((unsigned)((n + 255) / 256)), dim3(256), 0, [&] {
                sk::skinny_combine<1>(packed.data(), nw, 1, rows, y.data(), rows, nullptr, nullptr);
            });
        }
    };
    sum(g, gn, gs, gy);
    sum(u, un, us, uy);
    emu_launch(dim3((unsigned)((n + 255) / 256)), dim3(256), 0, [&] { swiglu_kernel(gy.data(), uy.data(), want.data(), n, lim); });
    emu_launch(dim3((unsigned)((n + 255) / 256)), dim3(256), 0, [&] {
        swiglu_parts_kernel(g.data(), gn, gs, u.data(), un, us, got.data(), n, lim);
    });
    char at[96];
    snprintf(at, sizeof at, "swiglu_parts n %lld planes %d / %d stride pad %lld", (long long)n, gn, un, (long long)pad);
    const int bad = differ(at, want.data(), got.data(), (size_t)n);
    printf("%s: %s\n", at, bad ? "DIFFERS FROM the summed planes' SwiGLU" : "bit-identical to the summed planes' SwiGLU");
}

static void run_all() {
    // the V4 shape (n 4, D 4096) as decode and verify, odd widths, n 8, many rows (the loop finisher)
    for (bool norm : {true, false}) {
        hc_pre_case(1, 4, 4096, norm, true);
        hc_pre_case(5, 4, 4096, norm, norm);
        hc_pre_case(3, 4, 1000, norm, true);
        hc_pre_case(2, 3, 200, norm, false);
        hc_pre_case(7, 8, 257, norm, true);
        hc_pre_case(2, 5, 300, norm, true);  // 25 elements: the largest matrix of the one-warp mapping (hc_mapping_warp)
        hc_pre_case(1, 6, 256, norm, false);  // 36 elements: the block mapping (hc_mapping)
    }
    hc_pre_case(66, 4, 100, true, true);
    for (bool norm : {true, false})
        for (bool combine : {false, true}) {
            hc_post_case(1, 4, 4096, 6, combine, norm, false);
            hc_post_case(5, 4, 4096, 6, combine, norm, combine);
            hc_post_case(3, 4, 1000, 2, combine, norm, false);
            hc_post_case(2, 3, 200, 1, combine, norm, false);
            hc_post_case(4, 8, 257, 16, combine, norm, false);
        }
    hc_post_case(2, 4, 5000, 3, true, true, false);  // 20,000 values a row: the loop finisher at few rows
    hc_post_case(66, 4, 100, 6, true, true, true);
    hc_head_case(1, 4, 4096);
    hc_head_case(3, 4, 1000);
    hc_head_case(2, 8, 257);
    for (bool weighted : {false, true}) {
        rmsnorm_case(2, 4096, weighted, false);
        rmsnorm_case(3, 1000, weighted, true);
        rmsnorm_case(1, 16384, weighted, true);
        rmsnorm_case(2, 200, weighted, false);
        rmsnorm_case(1, 20000, weighted, false);
    }
    for (bool hash : {false, true})
        for (bool special : {false, true}) {
            moe_route_case(9, 16, 6, hash, special);
            moe_route_case(3, 256, 8, hash, special);
            moe_route_case(4, 7, 7, hash, special);
            moe_route_case(2, 300, 16, hash, special);
        }
    // last, so that the cases above keep their random inputs
    for (bool hash : {false, true}) {
        gate_route_case(1, 16, 4096, 6, DS4J_FMT_BF16, hash, 4096);
        gate_route_case(5, 16, 4096, 6, DS4J_FMT_BF16, hash, 4100);
        gate_route_case(3, 40, 1024, 6, DS4J_FMT_F32, hash, 1024);
        gate_route_case(2, 256, 4096, 8, DS4J_FMT_BF16, hash, 4096);
        gate_route_case(4, 33, 520, 2, DS4J_FMT_F16, hash, 528);
        gate_route_case(2, 6, 64, 6, DS4J_FMT_BF16, hash, 64);
    }
    swiglu_parts_case(6 * 2048, 8, 8, 0);    // the routed experts' w1 / w3 at one row (8 column partitions)
    swiglu_parts_case(2048, 1, 8, 0);        // the shared expert: W1 summed, W3's planes
    swiglu_parts_case(1000, 17, 3, 5);       // more planes than a batch of loads, planes apart
    swiglu_parts_case(300, 9, 1, 0);
}

}  // namespace mhc
