// Decode-step graphs (ds4j_gpu.h, "step graphs"): the kernels of a whole step are captured from the context's stream
// and launched as one graph. A step re-captures every time (positions and counts are kernel arguments that change
// per step), but launching needs an executable graph, which is costly to build; the context therefore keeps a few
// executables keyed by the captured topology and only updates the parameters of the one with the same topology.
// Topologies differ between steps where a compressor window completes and where none does, where the indexer
// starts selecting, between decode and verify paths, and so on; each such variant gets its own executable.
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <unordered_map>
#include <vector>

namespace ds4j {

#if DS4J_HAVE_GRAPHS

/** An open capture's stream is out of capture mode again; what was recorded is dropped. */
static void end_capture_dropping(ds4j_ctx* ctx) {
    branch_settle(ctx);
    hipGraph_t g = nullptr;
    hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
    if (hipStreamIsCapturing(ctx->stream, &st) == hipSuccess && st != hipStreamCaptureStatusNone) {
        hipStreamEndCapture(ctx->stream, &g);  // an invalidated capture ends with an error and no graph
        if (g) hipGraphDestroy(g);
    }
    hipGetLastError();  // the capture's errors are not the next call's
    ctx->capturing = false;
}

static inline uint64_t mix(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) {  // FNV-1a over the 8 bytes of v
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 1099511628211ull;
    }
    return h;
}

#if defined(__NVCC__) && !defined(__HIPCC__) && defined(CUDART_VERSION) && CUDART_VERSION >= 12030
#define DS4J_HAVE_PDL 1
#if CUDART_VERSION >= 13000
#define DS4J_GRAPH_EDGES cudaGraphGetEdges
#define DS4J_GRAPH_ADD_DEPS cudaGraphAddDependencies
#define DS4J_GRAPH_REMOVE_DEPS cudaGraphRemoveDependencies
#else
#define DS4J_GRAPH_EDGES cudaGraphGetEdges_v2
#define DS4J_GRAPH_ADD_DEPS cudaGraphAddDependencies_v2
#define DS4J_GRAPH_REMOVE_DEPS cudaGraphRemoveDependencies_v2
#endif
#else
#define DS4J_HAVE_PDL 0
#endif

/** g's edges as (from, to) node pairs, in the order the runtime lists them; false when it could not list them. */
static bool graph_edges(hipGraph_t g, std::vector<hipGraphNode_t>& from, std::vector<hipGraphNode_t>& to) {
    size_t n = 0;
#if DS4J_HAVE_PDL
    bool ok = DS4J_GRAPH_EDGES(g, nullptr, nullptr, nullptr, &n) == cudaSuccess;
    from.resize(n);
    to.resize(n);
    // the edge data must be asked for: without it the runtime refuses to list programmatic edges (a lossy query)
    std::vector<cudaGraphEdgeData> data(n);
    if (ok && n > 0) ok = DS4J_GRAPH_EDGES(g, from.data(), to.data(), data.data(), &n) == cudaSuccess;
#else
    bool ok = hipGraphGetEdges(g, nullptr, nullptr, &n) == hipSuccess;
    from.resize(n);
    to.resize(n);
    if (ok && n > 0) ok = hipGraphGetEdges(g, from.data(), to.data(), &n) == hipSuccess;
#endif
    if (!ok) hipGetLastError();
    from.resize(n);
    to.resize(n);
    return ok;
}

/**
 * The topology of a captured graph as a 64-bit key: node count, then each node's type and, for kernel nodes, the
 * kernel function, in the order the runtime lists them (the capture order), then its edges as pairs of those positions
 * (sorted). Equal keys mean the same graph up to parameters, which is what an executable graph update accepts (a rare
 * collision only costs a refused update and a new instantiation). The edges matter since a step may branch
 * (ds4j_branch_begin): the same calls captured with and without branches give the same nodes in the same order, and an
 * update that pairs nodes by position alone (HIP's) would move one graph's parameters onto the other's edges.
 */
static int graph_signature(hipGraph_t g, uint64_t* out) {
    size_t n = 0;
    hipError_t e = hipGraphGetNodes(g, nullptr, &n);
    if (e != hipSuccess) return fail_hip(e, "hipGraphGetNodes");
    std::vector<hipGraphNode_t> nodes(n);
    if (n > 0) {
        e = hipGraphGetNodes(g, nodes.data(), &n);
        if (e != hipSuccess) return fail_hip(e, "hipGraphGetNodes");
    }
    uint64_t h = mix(1469598103934665603ull, (uint64_t)n);
    std::unordered_map<hipGraphNode_t, uint32_t> pos;
    pos.reserve(n);
    for (size_t i = 0; i < n; i++) {
        pos[nodes[i]] = (uint32_t)i;
        hipGraphNodeType t;
        e = hipGraphNodeGetType(nodes[i], &t);
        if (e != hipSuccess) return fail_hip(e, "hipGraphNodeGetType");
        h = mix(h, (uint64_t)t);
        if (t == hipGraphNodeTypeKernel) {
            hipKernelNodeParams p;
            e = hipGraphKernelNodeGetParams(nodes[i], &p);
            if (e != hipSuccess) return fail_hip(e, "hipGraphKernelNodeGetParams");
            h = mix(h, (uint64_t)(uintptr_t)p.func);
        }
    }
    std::vector<hipGraphNode_t> from, to;
    if (!graph_edges(g, from, to)) return fail(DS4J_ERR_RUNTIME, "listing a captured graph's edges failed");
    std::vector<uint64_t> pairs(from.size());
    for (size_t i = 0; i < from.size(); i++) pairs[i] = (uint64_t)pos[from[i]] << 32 | pos[to[i]];
    std::sort(pairs.begin(), pairs.end());
    h = mix(h, (uint64_t)pairs.size());
    for (uint64_t v : pairs) h = mix(h, v);
    *out = h == 0 ? 1 : h;  // 0 marks an empty slot
    return DS4J_OK;
}

#if DS4J_HAVE_PDL
/** A kernel for pdl_enabled to ask the runtime with which PTX version the library's kernels were built. */
__global__ void pdl_build_probe() {
    DS4J_AWAIT_PREVIOUS();
}

/** Set once programmatic_edges could not put a graph's plain edges back: no more programmatic edges in this process. */
static std::atomic<bool> pdl_broken{false};
#endif

/**
 * Whether step graphs on ctx's device get programmatic kernel-to-kernel edges (programmatic_edges): a CUDA build
 * (12.3 or later) on compute capability 9.0+ whose kernels, as loaded for that device, were built for 9.0 or later
 * (their PTX version, asked of pdl_build_probe: a build for an older target, DS4J_GPU_ARCH, compiles
 * DS4J_AWAIT_PREVIOUS to nothing, and its kernels must not be reached by such edges), unless DS4J_PDL is "0" (for A/B
 * measurements) or a refused edge change could not be undone (pdl_broken). Read once per process (the setting) and
 * per device (the capability and the build).
 */
static bool pdl_enabled(ds4j_ctx* ctx) {
#if DS4J_HAVE_PDL
    static std::atomic<int> off{-1};
    if (env_equals(off, "DS4J_PDL", "0") || pdl_broken.load()) return false;
    constexpr int MAXDEV = 64;
    static std::atomic<int> on[MAXDEV];  // 0 unknown, 1 off, 2 on
    const int d = ctx->device;
    if (d < 0 || d >= MAXDEV) return false;
    int v = on[d].load();
    if (v == 0) {
        bool ok = device_cc_major(d) >= 9;
        if (ok) {
            // the attributes are those of the code loaded for the current device: ask on d, then restore it
            int cur = -1;
            cudaFuncAttributes fa{};
            ok = cudaGetDevice(&cur) == cudaSuccess && (cur == d || cudaSetDevice(d) == cudaSuccess) &&
                 cudaFuncGetAttributes(&fa, pdl_build_probe) == cudaSuccess && fa.ptxVersion >= 90;
            if (cur >= 0 && cur != d) cudaSetDevice(cur);
            cudaGetLastError();
        }
        v = ok ? 2 : 1;
        on[d].store(v);
    }
    return v == 2;
#else
    (void)ctx;
    return false;
#endif
}

/**
 * Turns every kernel-to-kernel edge of a captured step into a programmatic one: the downstream kernel may launch once
 * every block of the upstream one has started and run griddepcontrol.launch_dependents, and waits in its first line
 * (DS4J_AWAIT_PREVIOUS, common.h) until the upstream kernel has completed with its writes visible. Same results;
 * what it saves is part of the gap between two dependent kernels of a graph, ~0.2 µs each on the H200
 * (tools/device/pdl-probe.cu), over the ~2,000 kernels of a full-depth step. Edges to or from copies and memsets stay
 * full serializations. No-op where pdl_enabled is false.
 * @return true when g keeps every dependency it was captured with (converted, or left or put back as captured where
 *         the runtime refused the change; DS4J_PDL_REPORT=1 prints why); false when a failed change could not be
 *         undone, so g may lack dependencies and must not run
 */
static bool programmatic_edges(ds4j_ctx* ctx, hipGraph_t g) {
#if DS4J_HAVE_PDL
    if (!pdl_enabled(ctx)) return true;
    static const bool report = [] {  // diagnostics: what each capture got
        const char* r = getenv("DS4J_PDL_REPORT");
        return r && strcmp(r, "1") == 0;
    }();
    size_t n = 0;
    if (DS4J_GRAPH_EDGES(g, nullptr, nullptr, nullptr, &n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return true;
    }
    std::vector<cudaGraphNode_t> from(n), to(n);
    std::vector<cudaGraphEdgeData> data(n);
    if (DS4J_GRAPH_EDGES(g, from.data(), to.data(), data.data(), &n) != cudaSuccess) {
        cudaGetLastError();
        return true;
    }
    std::vector<cudaGraphNode_t> kf, kt;
    std::vector<cudaGraphEdgeData> plain;
    for (size_t i = 0; i < n; i++) {
        cudaGraphNodeType tf, tt;
        if (data[i].type != cudaGraphDependencyTypeDefault || data[i].from_port != 0) continue;
        if (cudaGraphNodeGetType(from[i], &tf) != cudaSuccess || cudaGraphNodeGetType(to[i], &tt) != cudaSuccess) {
            cudaGetLastError();
            return true;
        }
        if (tf != cudaGraphNodeTypeKernel || tt != cudaGraphNodeTypeKernel) continue;
        kf.push_back(from[i]);
        kt.push_back(to[i]);
        plain.push_back(data[i]);
    }
    if (kf.empty()) return true;
    cudaGraphEdgeData prog{};
    prog.from_port = cudaGraphKernelNodePortProgrammatic;
    prog.type = cudaGraphDependencyTypeProgrammatic;
    std::vector<cudaGraphEdgeData> progs(kf.size(), prog);
    cudaError_t e = DS4J_GRAPH_REMOVE_DEPS(g, kf.data(), kt.data(), plain.data(), kf.size());
    if (e != cudaSuccess) {
        cudaGetLastError();
        // the runtime does not say whether some edges went before it failed: the graph is not trusted, and later
        // captures keep their plain edges (else every capture might be refused, and graphs turned off altogether)
        if (report) fprintf(stderr, "ds4j: programmatic edges: removing %zu edges failed: %s\n", kf.size(), cudaGetErrorString(e));
        pdl_broken.store(true);
        return false;
    }
    e = DS4J_GRAPH_ADD_DEPS(g, kf.data(), kt.data(), progs.data(), kf.size());
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (report) fprintf(stderr, "ds4j: programmatic edges: adding %zu failed: %s\n", kf.size(), cudaGetErrorString(e));
        // put the plain edges back: the graph must keep every dependency
        const cudaError_t back = DS4J_GRAPH_ADD_DEPS(g, kf.data(), kt.data(), plain.data(), kf.size());
        cudaGetLastError();
        if (back != cudaSuccess) pdl_broken.store(true);
        return back == cudaSuccess;
    }
    if (report) fprintf(stderr, "ds4j: programmatic edges: %zu of %zu edges\n", kf.size(), n);
    return true;
#else
    (void)ctx, (void)g;
    return true;
#endif
}

/** Ends a capture whose graph g programmatic_edges could not keep whole: drops it; DS4J_ERR_CAPTURE. */
static int32_t refuse_damaged(hipGraph_t g) {
    hipGraphDestroy(g);
    return fail(DS4J_ERR_CAPTURE, "programmatic edges: the captured step's graph lost dependencies it could not get "
                                  "back (programmatic edges are off from now on); nothing of the captured step ran");
}

/** Re-reports the last failure under another code, with suffix appended to its message. */
static int recode(int code, const char* suffix) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ds4j_last_error());
    return fail(code, "%s%s", msg, suffix);
}

static void drop_slot(GraphSlot& s) {
    if (s.exec) hipGraphExecDestroy(s.exec);
    s.exec = nullptr;
    s.signature = 0;
    s.used = 0;
}

#endif  // DS4J_HAVE_GRAPHS

void graphs_destroy(ds4j_ctx* ctx) {
#if DS4J_HAVE_GRAPHS
    if (ctx->capturing) end_capture_dropping(ctx);
    for (GraphSlot& s : ctx->graphs) drop_slot(s);
#else
    (void)ctx;
#endif
}

/**
 * Ends the open capture on ctx's stream into *g (the caller owns it); DS4J_ERR_CAPTURE when the runtime gives no graph
 * (nothing of the captured step ran). The context is out of capture mode either way.
 */
static int32_t end_capture(ds4j_ctx* ctx, hipGraph_t* g) {
    branch_settle(ctx);  // a branch left open or unjoined would end the capture with an error
    hipError_t e = hipStreamEndCapture(ctx->stream, g);
    ctx->capturing = false;
    if (e != hipSuccess || !*g) {
        if (*g) hipGraphDestroy(*g);
        *g = nullptr;
        hipGetLastError();
        return fail(DS4J_ERR_CAPTURE, "hipStreamEndCapture: %s (%s); nothing of the captured step ran",
                    hipGetErrorName(e), hipGetErrorString(e));
    }
    return DS4J_OK;
}

}  // namespace ds4j

using ds4j::fail;
using ds4j::fail_hip;

extern "C" {

int32_t ds4j_graph_available(int32_t* host_available) {
    DS4J_ARG(host_available, "ds4j_graph_available: null output");
    *host_available = DS4J_HAVE_GRAPHS;
    return DS4J_OK;
}

#if DS4J_HAVE_GRAPHS

int32_t ds4j_graph_begin(ds4j_ctx* ctx) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(!ctx->capturing, "ds4j_graph_begin: a capture is already open on this context");
    ds4j::branch_settle(ctx);  // a capture starts on the context's own stream, after everything queued before it
    // relaxed: the calling thread may still allocate (a workspace that grows mid-step); calls that wait are refused
    // by the library itself (DS4J_NOT_CAPTURING) before they reach the runtime
    hipError_t e = hipStreamBeginCapture(ctx->stream, hipStreamCaptureModeRelaxed);
    if (e != hipSuccess) {
        int rc = fail_hip(e, "hipStreamBeginCapture");
        ds4j::end_capture_dropping(ctx);
        return rc == DS4J_ERR_RUNTIME ? ds4j::recode(DS4J_ERR_CAPTURE, "") : rc;
    }
    ctx->capturing = true;
    return DS4J_OK;
}

int32_t ds4j_graph_end_launch(ds4j_ctx* ctx, int32_t* host_how) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(host_how, "ds4j_graph_end_launch: null output");
    DS4J_ARG(ctx->capturing, "ds4j_graph_end_launch: no capture is open on this context (ds4j_graph_begin)");
    hipGraph_t g = nullptr;
    const int32_t erc = ds4j::end_capture(ctx, &g);
    if (erc != DS4J_OK) return erc;
    if (!ds4j::programmatic_edges(ctx, g)) return ds4j::refuse_damaged(g);
    hipError_t e = hipSuccess;
    uint64_t sig = 0;
    int rc = ds4j::graph_signature(g, &sig);
    if (rc != DS4J_OK) {
        hipGraphDestroy(g);
        return ds4j::recode(DS4J_ERR_CAPTURE, "; nothing of the captured step ran");
    }
    ds4j::GraphSlot* slot = nullptr;
    for (ds4j::GraphSlot& s : ctx->graphs)
        if (s.exec && s.signature == sig) slot = &s;
    int32_t how = DS4J_GRAPH_UPDATED;
    if (slot) {
        hipGraphNode_t bad = nullptr;
        hipGraphExecUpdateResult res;
        e = hipGraphExecUpdate(slot->exec, g, &bad, &res);
        if (e != hipSuccess || res != hipGraphExecUpdateSuccess) {
            hipGetLastError();
            ds4j::drop_slot(*slot);
            how = DS4J_GRAPH_REINSTANTIATED;
        }
    } else {
        // a new topology: an empty slot, else the least recently launched one
        for (ds4j::GraphSlot& s : ctx->graphs)
            if (!slot || (slot->exec && (!s.exec || s.used < slot->used))) slot = &s;
        ds4j::drop_slot(*slot);
        how = DS4J_GRAPH_INSTANTIATED;
    }
    if (!slot->exec) {
        e = hipGraphInstantiateWithFlags(&slot->exec, g, 0);
        if (e != hipSuccess) {
            slot->exec = nullptr;
            hipGraphDestroy(g);
            hipGetLastError();
            return fail(DS4J_ERR_CAPTURE, "hipGraphInstantiateWithFlags: %s (%s); nothing of the captured step ran", hipGetErrorName(e),
                        hipGetErrorString(e));
        }
        slot->signature = sig;
    }
    hipGraphDestroy(g);  // the executable does not need it
    slot->used = ++ctx->graph_clock;
    e = hipGraphLaunch(slot->exec, ctx->stream);
    if (e != hipSuccess) {
        ds4j::drop_slot(*slot);
        rc = fail_hip(e, "hipGraphLaunch");
        return rc == DS4J_ERR_CAPTURE ? ds4j::recode(DS4J_ERR_RUNTIME, "") : rc;
    }
    ds4j::launched_graphs.fetch_add(1, std::memory_order_relaxed);
    *host_how = how;
    return DS4J_OK;
}

int32_t ds4j_graph_discard(ds4j_ctx* ctx) {
    DS4J_CHECK_CTX(ctx);
    ds4j::end_capture_dropping(ctx);
    hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
    hipError_t e = hipStreamIsCapturing(ctx->stream, &st);
    if (e != hipSuccess) return fail_hip(e, "hipStreamIsCapturing");
    if (st != hipStreamCaptureStatusNone) return fail(DS4J_ERR_RUNTIME, "ds4j_graph_discard: the stream is still capturing");
    return DS4J_OK;
}

int32_t ds4j_graph_capturing(ds4j_ctx* ctx, int32_t* host_capturing) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(host_capturing, "ds4j_graph_capturing: null output");
    hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
    hipError_t e = hipStreamIsCapturing(ctx->stream, &st);
    if (e != hipSuccess) return fail_hip(e, "hipStreamIsCapturing");
    *host_capturing = st != hipStreamCaptureStatusNone || ctx->capturing ? 1 : 0;
    return DS4J_OK;
}

int32_t ds4j_graph_release(ds4j_ctx* ctx) {
    DS4J_CHECK_CTX(ctx);
    DS4J_NOT_CAPTURING(ctx);
    hipError_t e = hipStreamSynchronize(ctx->stream);  // no launch of an executable may be in flight
    ds4j::graphs_destroy(ctx);
    return e == hipSuccess ? DS4J_OK : fail_hip(e, "hipStreamSynchronize");
}

int32_t ds4j_graph_end_keep(ds4j_ctx* ctx, int64_t* host_exec) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(host_exec, "ds4j_graph_end_keep: null output");
    DS4J_ARG(ctx->capturing, "ds4j_graph_end_keep: no capture is open on this context (ds4j_graph_begin)");
    *host_exec = 0;
    hipGraph_t g = nullptr;
    const int32_t erc = ds4j::end_capture(ctx, &g);
    if (erc != DS4J_OK) return erc;
    if (!ds4j::programmatic_edges(ctx, g)) return ds4j::refuse_damaged(g);
    hipGraphExec_t exec = nullptr;
    hipError_t e = hipGraphInstantiateWithFlags(&exec, g, 0);
    hipGraphDestroy(g);  // the executable does not need it
    if (e != hipSuccess || !exec) {
        hipGetLastError();
        return fail(DS4J_ERR_CAPTURE, "hipGraphInstantiateWithFlags: %s (%s); nothing of the captured step ran",
                    hipGetErrorName(e), hipGetErrorString(e));
    }
    *host_exec = (int64_t)(intptr_t)exec;
    return DS4J_OK;
}

int32_t ds4j_graph_replay(ds4j_ctx* ctx, int64_t exec) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(exec != 0, "ds4j_graph_replay: null executable graph");
    DS4J_ARG(!ctx->capturing, "ds4j_graph_replay: a capture is open on this context");
    hipError_t e = hipGraphLaunch((hipGraphExec_t)(intptr_t)exec, ctx->stream);
    if (e != hipSuccess) {
        int rc = fail_hip(e, "hipGraphLaunch");
        return rc == DS4J_ERR_CAPTURE ? ds4j::recode(DS4J_ERR_RUNTIME, "") : rc;
    }
    ds4j::launched_graphs.fetch_add(1, std::memory_order_relaxed);
    return DS4J_OK;
}

int32_t ds4j_graph_destroy(ds4j_ctx* ctx, int64_t exec) {
    DS4J_CHECK_CTX(ctx);
    DS4J_NOT_CAPTURING(ctx);
    if (exec == 0) return DS4J_OK;
    hipError_t e = hipStreamSynchronize(ctx->stream);  // no launch of it may be in flight
    hipError_t d = hipGraphExecDestroy((hipGraphExec_t)(intptr_t)exec);
    if (e != hipSuccess) return fail_hip(e, "hipStreamSynchronize");
    return d == hipSuccess ? DS4J_OK : fail_hip(d, "hipGraphExecDestroy");
}

#else  // no graph API in this HIP: report it, never capture

int32_t ds4j_graph_begin(ds4j_ctx* ctx) {
    DS4J_CHECK_CTX(ctx);
    return fail(DS4J_ERR_CAPTURE, "ds4j_graph_begin: this build has no graph support (ROCm older than 5.3)");
}

int32_t ds4j_graph_end_launch(ds4j_ctx* ctx, int32_t* host_how) {
    DS4J_CHECK_CTX(ctx);
    (void)host_how;
    return fail(DS4J_ERR_ARG, "ds4j_graph_end_launch: no capture is open on this context (no graph support)");
}

int32_t ds4j_graph_discard(ds4j_ctx* ctx) {
    DS4J_CHECK_CTX(ctx);
    return DS4J_OK;
}

int32_t ds4j_graph_capturing(ds4j_ctx* ctx, int32_t* host_capturing) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(host_capturing, "ds4j_graph_capturing: null output");
    *host_capturing = 0;
    return DS4J_OK;
}

int32_t ds4j_graph_release(ds4j_ctx* ctx) {
    DS4J_CHECK_CTX(ctx);
    return DS4J_OK;
}

int32_t ds4j_graph_end_keep(ds4j_ctx* ctx, int64_t* host_exec) {
    DS4J_CHECK_CTX(ctx);
    if (host_exec) *host_exec = 0;
    return fail(DS4J_ERR_ARG, "ds4j_graph_end_keep: no capture is open on this context (no graph support)");
}

int32_t ds4j_graph_replay(ds4j_ctx* ctx, int64_t exec) {
    DS4J_CHECK_CTX(ctx);
    (void)exec;
    return fail(DS4J_ERR_ARG, "ds4j_graph_replay: this build has no graph support");
}

int32_t ds4j_graph_destroy(ds4j_ctx* ctx, int64_t exec) {
    DS4J_CHECK_CTX(ctx);
    return exec == 0 ? DS4J_OK : fail(DS4J_ERR_ARG, "ds4j_graph_destroy: this build has no graph support");
}

#endif  // DS4J_HAVE_GRAPHS

}  // extern "C"
