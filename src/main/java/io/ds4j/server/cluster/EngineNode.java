package io.ds4j.server.cluster;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.ds4j.server.HttpVerticle;
import io.ds4j.server.ModelInfo;
import io.ds4j.server.ServerState;
import io.ds4j.server.config.ServerConfig;
import io.vertx.core.Future;
import io.vertx.core.VerticleBase;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.eventbus.Message;
import io.vertx.core.eventbus.MessageConsumer;
import io.vertx.core.http.HttpClient;
import io.vertx.core.http.HttpClientOptions;
import io.vertx.core.http.HttpClientRequest;
import io.vertx.core.http.HttpClientResponse;
import io.vertx.core.http.HttpMethod;
import io.vertx.core.http.PoolOptions;
import io.vertx.core.http.RequestOptions;
import io.vertx.core.json.JsonObject;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The cluster side of an engine node. It announces the node's model, backend, capacity and health on
 * {@link #ANNOUNCE} every {@code cluster.announceMs}, and serves the requests gateways route to it: each
 * {@link ClusterFrame.Kind#GEN} frame is replayed against this node's own HTTP API on the loopback interface, and
 * what that API answers goes back as HEAD, DATA and END frames — so a cluster answers byte for byte as a single
 * server (same validation, errors and SSE chunks). A CANCEL frame, or the gateway leaving the cluster, closes the
 * local exchange, which the API treats as a client that went away: the engine stops the request at its next step.
 */
public final class EngineNode extends VerticleBase {
    /** Where engine nodes publish their state (a JSON object, see {@link #announcement()}). */
    public static final String ANNOUNCE = "ds4j.cluster.announce";
    private static final Logger LOG = LoggerFactory.getLogger(EngineNode.class);
    /** Request headers a gateway passes on (hop-by-hop and length headers are the HTTP client's business). */
    static final Set<String> PASSED_REQUEST_HEADERS = Set.of("authorization", "content-type", "accept", "origin",
            // the API key as Anthropic's SDKs send it: the engine checks the key as the gateway did, in the header it came in
            "x-api-key",
            "access-control-request-method", "access-control-request-headers", "x-request-id",
            // a gateway refuses a compressed POST body itself (HttpVerticle.admitBody); passed on all the same, so that an
            // engine never reads a compressed body as text
            "content-encoding");
    /** Response headers passed back to the client. */
    static final Set<String> PASSED_RESPONSE_HEADERS = Set.of("content-type", "cache-control", "retry-after", "allow",
            "www-authenticate", "x-accel-buffering", "vary", "access-control-allow-origin", "access-control-allow-methods",
            "access-control-allow-headers", "access-control-max-age", "access-control-expose-headers", "x-ds4j-ignored-fields",
            HttpVerticle.NOTES_HEADER, "x-request-id");

    private final ServerState state;
    private final ClusterSupport cluster;
    private final String name;
    private final String bootId = ClusterSupport.bootId();
    private final Map<String, Exchange> inflight = new HashMap<>();
    private final AtomicLong served = new AtomicLong(), frames = new AtomicLong();
    private HttpClient client;
    private MessageConsumer<ClusterFrame> consumer;
    private long timer = -1;

    /**
     * @param state   the engine server's state (its HTTP port, model and load)
     * @param cluster the joined cluster
     * @param name    how gateways name this node to clients (X-Ds4j-Engine) and in /props
     */
    public EngineNode(ServerState state, ClusterSupport cluster, String name) {
        this.state = state;
        this.cluster = cluster;
        this.name = name;
    }

    /** The address gateways send a node's frames to. */
    static String address(String nodeId) {
        return "ds4j.cluster.engine." + nodeId;
    }

    @Override
    public Future<?> start() {
        ServerConfig cfg = state.config();
        String host = cfg.host().equals("0.0.0.0") || cfg.host().equals("::") ? "127.0.0.1" : cfg.host();
        // the client drops an idle connection (after half of limits.headerReadTimeoutMs, at least 1 s) before the
        // server closes it: a request sent on a connection the server is closing at that moment would fail
        int keepAliveSeconds = Math.max(1, cfg.headerReadTimeoutMs() / 2000);
        client = vertx.createHttpClient(new HttpClientOptions().setDefaultHost(host).setDefaultPort(state.port())
                .setKeepAlive(true).setKeepAliveTimeout(keepAliveSeconds).setTcpNoDelay(true), new PoolOptions().setHttp1MaxSize(1024));
        consumer = vertx.eventBus().consumer(address(cluster.nodeId()), this::onFrame);
        cluster.onMemberLeft(node -> context.runOnContext(v -> gatewayLeft(node)));
        timer = vertx.setPeriodic(0, cfg.cluster().announceMs(), id -> vertx.eventBus().publish(ANNOUNCE, announcement()));
        // a node that begins shutting down says so at once, so that gateways stop sending it requests it would refuse
        state.onDrain(() -> context.runOnContext(v -> vertx.eventBus().publish(ANNOUNCE, announcement())));
        state.clusterView(this::view);
        return consumer.completion().onSuccess(v -> LOG.info("cluster: engine node '{}' ({}) takes requests from gateways",
                name, cluster.nodeId()));
    }

    /** What gateways route by: this node's model, backend, capacity and health. */
    JsonObject announcement() {
        ServerConfig cfg = state.config();
        ModelInfo m = state.model();
        JsonObject a = new JsonObject().put("node", cluster.nodeId()).put("name", name).put("bootId", bootId)
                .put("status", state.draining() ? "draining" : m != null ? "ready" : state.loadError() != null ? "error" : "loading")
                .put("error", state.loadError())
                .put("running", state.metrics().running.get()).put("waiting", state.metrics().waiting.get())
                .put("maxActive", cfg.maxActive()).put("maxQueue", cfg.maxQueue()).put("served", served.get())
                .put("startedAt", state.startedAtMillis()).put("backend", cfg.backend())
                // a gateway whose cluster.engineTimeoutMs is too short for this period says so
                .put("announceMs", cfg.cluster().announceMs());
        if (m != null) {
            a.put("model", new JsonObject().put("id", m.id()).put("backend", m.backend()).put("path", m.path())
                    .put("embedded", m.embedded()).put("n_vocab", m.vocabSize())
                    .put("n_vocab_tokenizer", m.tokenizer().vocabSize()).put("n_ctx", state.maxContext())
                    .put("n_ctx_train", m.maxPositions()).put("n_layers", m.layers()).put("n_embd", m.hidden()));
        }
        return a;
    }

    private JsonNode view() {
        return Json.MAPPER.valueToTree(new JsonObject().put("role", "engine").put("node", cluster.nodeId()).put("name", name)
                .put("member", cluster.memberAddress()).put("members", cluster.members().size())
                .put("served", served.get()).put("frames_sent", frames.get()).getMap());
    }

    private void onFrame(Message<ClusterFrame> msg) {
        ClusterFrame f = msg.body();
        switch (f.kind()) {
            case GEN -> {
                msg.reply(ClusterFrame.head(f.id(), 100, name, null));
                relay(f);
            }
            case CANCEL -> {
                Exchange x = inflight.remove(f.id());
                if (x != null) x.abort(f.text() != null ? f.text() : "the gateway cancelled it");
            }
            default -> LOG.warn("cluster: unexpected frame {} from a gateway", f);
        }
    }

    private void gatewayLeft(String node) {
        for (Exchange x : new ArrayList<>(inflight.values())) {
            if (x.gateway.startsWith(GatewayVerticle.addressPrefix(node))) {
                inflight.remove(x.id);
                x.abort("its gateway left the cluster");
            }
        }
    }

    /** Replays a gateway's request against the local API and streams the answer back. */
    private void relay(ClusterFrame f) {
        served.incrementAndGet();
        Exchange x = new Exchange(f.id(), f.address());
        inflight.put(f.id(), x);
        int sp = f.text().indexOf(' ');
        HttpMethod method = HttpMethod.valueOf(f.text().substring(0, sp));
        RequestOptions ro = new RequestOptions().setMethod(method).setURI(f.text().substring(sp + 1));
        for (int i = 0; i < f.headers().size(); i += 2) ro.addHeader(f.headers().get(i), f.headers().get(i + 1));
        // the relay's id, by which the API side learns why the gateway stopped it (abort) rather than a client going away
        ro.putHeader(ServerState.RELAY_HEADER, f.id());
        client.request(ro).compose(req -> {
            x.req = req;
            if (x.aborted) {
                req.connection().close();
                return Future.failedFuture("cancelled");
            }
            return req.send(Buffer.buffer(f.data()));
        }).onSuccess(resp -> {
            if (x.aborted) return;
            List<String> h = new ArrayList<>();
            resp.headers().forEach(e -> {
                String name = e.getKey().toLowerCase(java.util.Locale.ROOT);
                // an answer to HEAD has no body to measure: its length is GET's, which only the API knows
                if (PASSED_RESPONSE_HEADERS.contains(name) || method == HttpMethod.HEAD && name.equals("content-length")) {
                    h.add(e.getKey());
                    h.add(e.getValue());
                }
            });
            x.send(ClusterFrame.head(x.id, resp.statusCode(), name, h));
            resp.handler(x::chunk);
            resp.endHandler(v -> x.end());
            resp.exceptionHandler(t -> x.failed(t));
        }).onFailure(x::failed);
    }

    /** One relayed exchange; touched on this verticle's event loop only. */
    private final class Exchange {
        final String id, gateway;
        HttpClientRequest req;
        Buffer pending;
        boolean flushQueued, aborted, ended;

        Exchange(String id, String gateway) {
            this.id = id;
            this.gateway = gateway;
        }

        void send(ClusterFrame f) {
            frames.incrementAndGet();
            vertx.eventBus().send(gateway, f);
        }

        /** Collects what the API wrote; one frame goes out per turn of the event loop, however many chunks came. */
        void chunk(Buffer b) {
            if (aborted) return;
            if (pending == null) pending = Buffer.buffer(b.length());
            pending.appendBuffer(b);
            if (!flushQueued) {
                flushQueued = true;
                context.runOnContext(v -> flush());
            }
        }

        void flush() {
            flushQueued = false;
            if (ended || aborted || pending == null || pending.length() == 0) return;
            send(ClusterFrame.data(id, pending.getBytes(), false));
            pending = null;
        }

        void end() {
            if (aborted || ended) return;
            ended = true;
            inflight.remove(id);
            send(ClusterFrame.data(id, pending == null ? null : pending.getBytes(), true));
            pending = null;
        }

        void failed(Throwable t) {
            if (aborted || ended) return;
            ended = true;
            inflight.remove(id);
            String why = t.getMessage() != null ? t.getMessage() : t.toString();
            LOG.warn("cluster: request {} from a gateway failed on engine node '{}': {}", id, name, why);
            send(ClusterFrame.fail(id, 502, "engine node '" + name + "' could not serve the request: " + why));
        }

        void abort(String why) {
            if (aborted || ended) return;
            aborted = true;
            LOG.info("cluster: request {} stopped: {}", id, why);
            // closing the local connection is what the API sees as a client going away: the engine cancels the
            // request at its next step (a stream reset alone leaves an HTTP/1.1 response running); the reason goes
            // first, for the API's lines on the request to say it
            if (req != null) {
                state.relayStopped(id, why);
                req.connection().close();
            }
        }
    }

    @Override
    public Future<?> stop() {
        if (timer != -1) vertx.cancelTimer(timer);
        for (Exchange x : new ArrayList<>(inflight.values())) x.abort("the engine node is stopping");
        return client != null ? client.close() : Future.succeededFuture();
    }
}
