package io.ds4j.server.cluster;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.json.Json;
import io.ds4j.server.ApiException;
import io.ds4j.server.BodyDeadline;
import io.ds4j.server.HeadDeadline;
import io.ds4j.server.HttpVerticle;
import io.ds4j.server.MalformedRequests;
import io.ds4j.server.config.ServerConfig;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MultiGauge;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import io.vertx.core.Future;
import io.vertx.core.Promise;
import io.vertx.core.Handler;
import io.vertx.core.VerticleBase;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.eventbus.DeliveryOptions;
import io.vertx.core.eventbus.Message;
import io.vertx.core.eventbus.MessageConsumer;
import io.vertx.core.http.HttpHeaders;
import io.vertx.core.http.HttpMethod;
import io.vertx.core.http.HttpServer;
import io.vertx.core.http.HttpServerRequest;
import io.vertx.core.http.HttpServerResponse;
import io.vertx.core.json.JsonObject;
import io.vertx.ext.web.Router;
import io.vertx.ext.web.RoutingContext;
import io.vertx.micrometer.PrometheusScrapingHandler;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;

/**
 * The HTTP front of a cluster: the same OpenAI-compatible API, with no model. It checks API keys, answers
 * {@code /health}, {@code /v1/models}, {@code /props} and {@code /metrics} from the engines' announcements, and relays
 * every other API request to one engine node over the clustered event bus ({@link ClusterFrame}s), writing back what
 * the node's API answers. Routing: see {@link EngineTable}; the session key is the {@value #SESSION_HEADER} header,
 * else the request body's {@code user} field. When an engine node leaves the cluster or falls silent for
 * {@code cluster.engineTimeoutMs}, its streams end with an SSE error event and its non-streamed requests get a 502
 * naming the node; a request the node had not answered yet is sent to another node instead.
 */
public final class GatewayVerticle extends VerticleBase {
    /** Header naming a conversation; requests with the same value go to the same engine node while it is up. */
    public static final String SESSION_HEADER = "X-Session-Id";
    /** Response header naming the engine node that served the request. */
    public static final String ENGINE_HEADER = "X-Ds4j-Engine";
    private static final Logger LOG = LoggerFactory.getLogger(GatewayVerticle.class);
    /** An engine node acknowledges a request as soon as it receives it; silence this long means it cannot. */
    private static final DeliveryOptions ACK = new DeliveryOptions().setSendTimeout(5000);

    private final Supplier<ServerConfig> config;
    private final ClusterSupport cluster;
    private final PrometheusMeterRegistry registry;
    private final String webroot;
    private final String bootId = ClusterSupport.bootId();
    private final EngineTable table = new EngineTable();
    private final Map<String, Relay> relays = new HashMap<>();
    /** Engine nodes warned of for announcing less often than cluster.engineTimeoutMs allows, with that period. */
    private final Map<String, Integer> slowAnnouncers = new HashMap<>();
    private final List<MessageConsumer<?>> consumers = new ArrayList<>();
    private final AtomicInteger readyGauge = new AtomicInteger(), knownGauge = new AtomicInteger();
    private String address;
    private HttpServer server;
    private HeadDeadline heads;
    private long timer = -1;
    private Counter lost, retried;
    private Timer relayLatency;
    private MultiGauge running, waiting;

    /**
     * @param config   the configuration in force (server.* for HTTP, cluster.* for timing)
     * @param registry served at /metrics, with the cluster gauges added
     * @param webroot  absolute folder of the playground's files
     */
    public GatewayVerticle(Supplier<ServerConfig> config, ClusterSupport cluster, PrometheusMeterRegistry registry, String webroot) {
        this.config = config;
        this.cluster = cluster;
        this.registry = registry;
        this.webroot = webroot;
    }

    /** The prefix of every gateway address of a node. */
    static String addressPrefix(String nodeId) {
        return "ds4j.cluster.gateway." + nodeId + ".";
    }

    /** Routing context key: whether the request's Origin is allowed (what HttpVerticle.cors returned for it). */
    private static final String ORIGIN_ALLOWED = "ds4j.originAllowed";

    /** The port the gateway listens on. */
    public int actualPort() {
        return server.actualPort();
    }

    @Override
    public Future<?> start() {
        address = addressPrefix(cluster.nodeId()) + Integer.toHexString(ThreadLocalRandom.current().nextInt());
        Gauge.builder("ds4j:cluster_engines_ready", readyGauge, AtomicInteger::get).description("Engine nodes ready").register(registry);
        Gauge.builder("ds4j:cluster_engines_known", knownGauge, AtomicInteger::get).description("Engine nodes known").register(registry);
        running = MultiGauge.builder("ds4j:cluster_engine_requests_running").description("Requests running, per engine node").register(registry);
        waiting = MultiGauge.builder("ds4j:cluster_engine_requests_waiting").description("Requests waiting, per engine node").register(registry);
        lost = Counter.builder("ds4j:cluster_engine_lost_total").description("Engine nodes that left or fell silent").register(registry);
        retried = Counter.builder("ds4j:cluster_requests_rerouted_total")
                .description("Requests sent to another node after their first one did not answer").register(registry);
        relayLatency = Timer.builder("ds4j:cluster_relay_latency_seconds")
                .description("Engine node sent a response frame -> gateway wrote it (nodes on this host only)")
                .publishPercentiles(0.5, 0.99).register(registry);

        Router r = Router.router(vertx);
        r.route().handler(ctx -> {
            // a body that stalls, also one of a request answered without reading it (a 401), is bounded as on a
            // single server
            // a stalled body's 408 in its route's API shape, Anthropic's on the Messages routes, as a single server's
            BodyDeadline.watch(ctx, config.get().bodyReadTimeoutMs(), () -> { }, HttpVerticle::errorBody);
            if (ctx.request().method() == HttpMethod.HEAD) HttpVerticle.headLength(ctx);
            HttpVerticle.gatewayRequestId(ctx);
            // the answers written here (health, models, props, 401, 404, 405) carry CORS headers as a single server's
            // do; a relayed answer carries its engine's instead (see Relay.writeHead)
            ctx.put(ORIGIN_ALLOWED, HttpVerticle.cors(ctx.request(), ctx.response(), config.get().corsOrigins()));
            // a path with bad percent-escapes is the 400 handler's, as on a single server
            ApiException badPath = MalformedRequests.path(ctx.request().path());
            if (badPath != null) ctx.fail(400, badPath);
            else ctx.next();
        });
        r.get("/health").handler(this::health);
        r.get("/v1/health").handler(this::health);
        // load balancers probe with HEAD: GET's status and headers without the body (as an engine node answers it)
        r.head("/health").handler(this::health);
        r.head("/v1/health").handler(this::health);
        // A preflight to a path no engine route answers is not relayed: it is answered here as a single server answers
        // it, before the key check (a browser's preflight carries no key). After the routes with a path, so that a
        // path the router cannot decode is its 400 before anything here reads the path.
        r.route().handler(ctx -> {
            boolean relayed = HttpVerticle.allowed(HttpVerticle.routed(ctx)) != null;
            if (relayed || !HttpVerticle.preflight(ctx, Boolean.TRUE.equals(ctx.get(ORIGIN_ALLOWED)), config.get().corsOrigins(),
                    e -> error(ctx.response(), ctx.request().path(), e))) ctx.next();
        });
        r.route().handler(this::auth);
        // HEAD wherever GET is answered here: GET's status and headers without the body
        r.get("/v1/models").method(HttpMethod.HEAD).handler(this::models);
        r.get("/models").method(HttpMethod.HEAD).handler(this::models);
        r.get("/props").method(HttpMethod.HEAD).handler(this::props);
        r.get("/metrics").method(HttpMethod.HEAD).handler(PrometheusScrapingHandler.create(registry));
        Handler<RoutingContext> files = HttpVerticle.staticFiles(webroot);
        // only what an engine's API answers is relayed (CORS preflights included); a path no route answers (OPTIONS
        // too), or a method its path does not answer, is refused here at once, as a single server refuses it: the body
        // is not awaited
        r.route("/*").handler(ctx -> {
            HttpMethod m = ctx.request().method();
            String path = HttpVerticle.routed(ctx);
            String allow = HttpVerticle.allowed(path);
            if (allow != null && (m == HttpMethod.OPTIONS || List.of(allow.split(", ")).contains(m.name()))) relay(ctx);
            else if (allow != null) {
                ctx.response().putHeader("Allow", allow);
                refuse(ctx, HttpVerticle.notAllowed(m, path, allow));
            } else if ((m == HttpMethod.GET || m == HttpMethod.HEAD) && !HttpVerticle.isApi(path)) files.handle(ctx);
            else ctx.next();
        });
        // a path the router cannot decode (a malformed percent-escape), or with escapes refused above: an OpenAI error
        // and one log line, not the router's plain-text answer with a stack trace at ERROR
        r.errorHandler(400, ctx -> {
            BodyDeadline.watch(ctx, config.get().bodyReadTimeoutMs(), () -> { }, ApiException.OPENAI);  // no route ran for a path the router cannot decode
            ApiException e = MalformedRequests.answer(ctx.request(), ctx.failure());
            LOG.info("{}{} {} rejected with 400: {}", HttpVerticle.named(ctx), ctx.request().method(),
                    HttpVerticle.shownTarget(ctx.request(), ctx.request().path()), e.getMessage());
            error(ctx.response(), ctx.request().path(), e);
        });
        r.errorHandler(404, ctx -> refuse(ctx, HttpVerticle.noRoute(ctx.request().method(),
                HttpVerticle.shownTarget(ctx.request(), HttpVerticle.routed(ctx)))));
        r.errorHandler(416, HttpVerticle::rangeNotSatisfiable);

        consumers.add(vertx.eventBus().<JsonObject>consumer(EngineNode.ANNOUNCE, m -> announced(m.body())));
        consumers.add(vertx.eventBus().<ClusterFrame>consumer(address, this::onFrame));
        cluster.onMemberLeft(node -> context.runOnContext(v -> {
            EngineTable.Engine e = table.remove(node, "left the cluster");
            if (e != null) engineLost(e, "left the cluster");
        }));
        ServerConfig.Cluster cc = config.get().cluster();
        timer = vertx.setPeriodic(Math.max(50, cc.announceMs() / 2), id -> {
            for (EngineTable.Engine e : table.silent(System.nanoTime(), cc.engineTimeoutMs() * 1_000_000L)) {
                String why = "stopped announcing itself for " + cc.engineTimeoutMs() + " ms (cluster.engineTimeoutMs)";
                table.remove(e.node, why);
                engineLost(e, why);
            }
            gauges();
        });
        ServerConfig cfg = config.get();
        heads = new HeadDeadline(vertx, () -> config.get().headerReadTimeoutMs());
        // a request Vert.x cannot parse gets the single server's answer (its JSON error, not an empty 400 / 414 / 431);
        // the gateway keeps no refusal counters
        server = heads.server(cfg.host(), cfg.port(), r, req -> HttpVerticle.answerUndecodable(req, config.get().apiKeys(),
                code -> { }, ApiException.OPENAI), () -> config.get().maxBodyBytes(), code -> { }, ApiException.OPENAI);
        return Future.all(consumers.stream().map(MessageConsumer::completion).toList())
                .compose(v -> server.listen())
                .onSuccess(s -> LOG.info("cluster: gateway listening on http://{}:{}; cluster '{}' member {}", cfg.host(),
                        s.actualPort(), cc.name(), cluster.memberAddress()));
    }

    // ------------------------------------------------------------------------------------------------ engines

    private void announced(JsonObject a) {
        EngineTable.Engine before = table.get(a.getString("node"));
        boolean wasReady = before != null && before.ready();
        if (table.announce(a, System.nanoTime()))
            LOG.info("cluster: engine node '{}' joined ({}, model {})", a.getString("name"), a.getString("status"),
                    a.getJsonObject("model") != null ? a.getJsonObject("model").getString("id") : "loading");
        EngineTable.Engine e = table.get(a.getString("node"));
        if (!wasReady && e.ready() && before != null) LOG.info("cluster: engine node '{}' is ready", e.name());
        int every = a.getInteger("announceMs", 0), timeout = config.get().cluster().engineTimeoutMs();
        // as the configuration's own check on one node: two announcements may be missed before the node is dropped
        // once per node and period: such a node is dropped and rejoins over and over, which would repeat it each time
        if (every * 2 > timeout && !Integer.valueOf(every).equals(slowAnnouncers.put(e.node, every)))
            LOG.warn("cluster: engine node '{}' announces itself every {} ms (its cluster.announceMs), but this gateway drops an"
                    + " engine node silent for {} ms (cluster.engineTimeoutMs): it will be dropped between announcements and"
                    + " rejoin, over and over; give this gateway a cluster.engineTimeoutMs of at least {} or the engine node a"
                    + " cluster.announceMs of at most {}", e.name(), every, timeout, every * 2, timeout / 2);
        gauges();  // /metrics agrees with /health from the moment a node is seen, not only at the next timer tick
    }

    private void gauges() {
        readyGauge.set(table.ready());
        knownGauge.set(table.all().size());
        List<MultiGauge.Row<?>> run = new ArrayList<>(), wait = new ArrayList<>();
        for (EngineTable.Engine e : table.all()) {
            run.add(MultiGauge.Row.of(Tags.of("engine", e.name()), e.ann.getInteger("running", 0)));
            wait.add(MultiGauge.Row.of(Tags.of("engine", e.name()), e.ann.getInteger("waiting", 0)));
        }
        running.register(run, true);
        waiting.register(wait, true);
    }

    private void engineLost(EngineTable.Engine e, String why) {
        lost.increment();
        int n = 0, ended = 0, resent = 0;
        for (Relay x : new ArrayList<>(relays.values())) {
            if (x.engine == e) {
                n++;
                switch (x.engineLost("engine node '" + e.name() + "' " + why)) {
                    case ENDED -> ended++;
                    case RESENT -> resent++;
                    case REFUSED -> { }
                }
            }
        }
        LOG.warn("cluster: engine node '{}' {}; {} request(s) in flight on it: {} ended (their answers had begun), {} re-sent to"
                + " other engine nodes, {} refused (no other engine node could take them); {} engine node(s) ready", e.name(), why,
                n, ended, resent, n - ended - resent, table.ready());
        gauges();
    }

    // ------------------------------------------------------------------------------------------------ small endpoints

    /** API key check (server.apiKeys: {@link HttpVerticle#keyRefusal}) for API routes, as a single server does it. */
    private void auth(RoutingContext ctx) {
        List<String> keys = config.get().apiKeys();
        String path = HttpVerticle.routed(ctx);
        // an OPTIONS on an engine's route is relayed without a key (its engine answers preflights); on any other API
        // path it needs the key, as on a single server
        boolean relayed = ctx.request().method() == HttpMethod.OPTIONS && HttpVerticle.allowed(path) != null;
        if (keys.isEmpty() || !HttpVerticle.isApi(path) || relayed) {
            ctx.next();
            return;
        }
        String refused = HttpVerticle.keyRefusal(ctx.request(), path, keys);
        if (refused == null) {
            ctx.next();
            return;
        }
        ctx.response().putHeader("WWW-Authenticate", "Bearer");
        error(ctx.response(), ctx.request().path(), new ApiException(401, "invalid_request_error", "invalid_api_key", null, refused, null));
    }

    private void health(RoutingContext ctx) {
        if (draining) {
            // as a single server's: load balancers stop routing here while the relayed requests finish
            json(ctx.response(), 503, Json.object().put("status", "shutting_down").put("role", "gateway"));
            return;
        }
        int ready = table.ready();
        ObjectNode o = Json.object().put("status", ready > 0 ? "ready" : "unavailable").put("role", "gateway");
        o.putObject("engines").put("ready", ready).put("known", table.all().size());
        if (ready == 0) ctx.response().putHeader("Retry-After", "5");
        json(ctx.response(), ready > 0 ? 200 : 503, o);
    }

    private void models(RoutingContext ctx) {
        ObjectNode root = Json.object().put("object", "list");
        ArrayNode data = root.putArray("data");
        Map<String, ObjectNode> seen = new HashMap<>();
        for (EngineTable.Engine e : table.all()) {
            JsonObject m = e.ann.getJsonObject("model");
            if (!e.ready() || m == null) continue;
            ObjectNode entry = seen.get(m.getString("id"));
            if (entry == null) {
                entry = data.addObject();
                entry.put("id", m.getString("id")).put("object", "model").put("created", e.ann.getLong("startedAt", 0L) / 1000)
                        .put("owned_by", "ds4j");
                entry.set("meta", tree(m));
                entry.putArray("engines");
                seen.put(m.getString("id"), entry);
            }
            // vLLM's context limit: the smallest of the engines serving the model, since a request may go to any of them
            Integer ctxLen = m.getInteger("n_ctx");
            if (ctxLen != null && (!entry.has("max_model_len") || ctxLen < entry.get("max_model_len").asInt()))
                entry.put("max_model_len", ctxLen);
            ((ArrayNode) entry.get("engines")).add(e.name());
        }
        if (data.isEmpty()) {
            error(ctx.response(), ctx.request().path(), new ApiException(503, "unavailable_error", "no_engine", null, table.pick(null, null, Set.of()).message(), 5));
            return;
        }
        json(ctx.response(), 200, root);
    }

    private void props(RoutingContext ctx) {
        ServerConfig cfg = config.get();
        ObjectNode o = Json.object().put("build_info", "ds4j-0.1.0").put("status", table.ready() > 0 ? "ready" : "unavailable");
        ObjectNode c = o.putObject("cluster");
        c.put("role", "gateway").put("name", cfg.cluster().name()).put("node", cluster.nodeId())
                .put("member", cluster.memberAddress()).put("members", cluster.members().size())
                .put("engines_ready", table.ready()).put("engines_known", table.all().size())
                .put("session_key", SESSION_HEADER + " header, else the body's user field");
        ArrayNode nodes = c.putArray("engines");
        int running = 0, waiting = 0, slots = 0;
        for (EngineTable.Engine e : table.all()) {
            ObjectNode n = (ObjectNode) tree(e.ann);
            n.remove("bootId");
            n.put("inflight_from_this_gateway", e.inflight).put("routed_by_this_gateway", e.routed)
                    .put("last_seen_ms", (System.nanoTime() - e.seenNanos) / 1_000_000);
            nodes.add(n);
            if (e.ready()) {
                running += e.ann.getInteger("running", 0);
                waiting += e.ann.getInteger("waiting", 0);
                slots += e.maxActive();
            }
        }
        o.putObject("load").put("running", running).put("waiting", waiting);
        o.put("total_slots", slots);
        o.set("config", cfg.toJson(true));
        json(ctx.response(), 200, o);
    }

    /** A Vert.x JSON object as a Jackson tree (nested objects included). */
    private static JsonNode tree(JsonObject o) {
        try {
            return Json.MAPPER.readTree(o.encode());
        } catch (java.io.IOException e) {
            throw new IllegalStateException(e);
        }
    }

    private static void json(HttpServerResponse resp, int status, JsonNode body) {
        if (resp.ended() || resp.closed()) return;
        resp.setStatusCode(status).putHeader(HttpHeaders.CONTENT_TYPE, "application/json").end(Json.write(body));
    }

    /**
     * The error body in the shape of path's API (HttpVerticle.errorBody), or, when a stream already started, the frame
     * that ends it in that API's shape (a relayed stream ends through Relay.fail, which counts its events).
     */
    private static void error(HttpServerResponse resp, String path, ApiException e) {
        if (resp.ended() || resp.closed()) return;
        if (resp.headWritten()) {
            resp.end(HttpVerticle.streamFailure(path, e, 0));
            return;
        }
        if (e.retryAfterSeconds() != null) resp.putHeader("Retry-After", Integer.toString(e.retryAfterSeconds()));
        // the route's API shape, as a single server answers (Anthropic's on its routes, OpenAI's elsewhere)
        resp.setStatusCode(e.status()).putHeader(HttpHeaders.CONTENT_TYPE, "application/json")
                .end(Json.write(HttpVerticle.errorBody(path, e)));
    }

    // ------------------------------------------------------------------------------------------------ relaying

    /**
     * Relays a request. A POST's body is read first (up to server.maxBodyBytes, within limits.bodyReadTimeoutMs:
     * {@link BodyDeadline}), after what its head alone decides ({@link HttpVerticle#admitBody}: 415, 413 or 100
     * Continue, as on a single server); any other method goes at once, without its body.
     */
    private void relay(RoutingContext ctx) {
        HttpServerRequest req = ctx.request();
        if (draining) {
            refuse(ctx, HttpVerticle.shuttingDown());
            return;
        }
        if (req.method() != HttpMethod.POST) {
            // an engine's API reads a body only for POST routes: its answers to GET, HEAD and OPTIONS never depend on
            // one, and a single server answers them without reading it. Waiting for it here would let a client that
            // declares a body and never sends it hold the relay until a 408. The body is left unread, as on a single
            // server: once the answer went out, the body's deadline closes the connection if the body did not come.
            forward(ctx, new byte[0]);
            return;
        }
        int limit = config.get().maxBodyBytes();
        Buffer body = Buffer.buffer();
        ApiException refused = HttpVerticle.admitBody(ctx, limit);
        boolean[] over = {refused != null};
        if (refused != null) refuse(ctx, refused);
        req.handler(chunk -> {
            if (over[0] || BodyDeadline.passed(ctx)) return;
            if (body.length() + chunk.length() > limit) {
                over[0] = true;
                refuse(ctx, HttpVerticle.tooLarge(limit, -1));
                return;
            }
            body.appendBuffer(chunk);
        });
        req.exceptionHandler(t -> BodyDeadline.arrived(ctx));
        req.endHandler(v -> {
            BodyDeadline.arrived(ctx);
            if (over[0] || BodyDeadline.passed(ctx)) return;
            forward(ctx, body.getBytes());
        });
        req.resume();
    }

    /** A request the gateway refuses itself before relaying it: one log line, as a single server writes, and the error. */
    private static void refuse(RoutingContext ctx, ApiException e) {
        LOG.info("{}{} {} rejected with {}: {}", HttpVerticle.named(ctx), ctx.request().method(),
                HttpVerticle.shownTarget(ctx.request(), ctx.request().path()), e.status(), e.logReason());
        error(ctx.response(), ctx.request().path(), e);
    }

    /** Routes a request with its body (the model and the session key are read from it) and sends it to an engine node. */
    private void forward(RoutingContext ctx, byte[] body) {
        HttpServerRequest req = ctx.request();
        String model = null, session = req.getHeader(SESSION_HEADER);
        if (body.length > 0) {
            try {
                JsonNode n = Json.MAPPER.readTree(body);
                if (n != null && n.isObject()) {
                    if (n.path("model").isTextual()) model = n.get("model").textValue();
                    if (session == null && n.path("user").isTextual() && !n.get("user").textValue().isEmpty())
                        session = n.get("user").textValue();
                }
            } catch (Exception ignored) {
                // not JSON: the engine's API answers with the precise 400, as a single server would
            }
        }
        // GET /v1/models/{id} goes to an engine serving that model (its own 404 names only its own model); its id read
        // as a single server reads it
        String path = HttpVerticle.routed(ctx);
        for (String prefix : List.of("/v1/models/", "/models/"))
            if (path.startsWith(prefix) && path.length() > prefix.length())
                model = HttpVerticle.pathModelId(path.substring(prefix.length()), table::serves);
        List<String> headers = new ArrayList<>();
        req.headers().forEach(e -> {
            if (EngineNode.PASSED_REQUEST_HEADERS.contains(e.getKey().toLowerCase(Locale.ROOT))) {
                headers.add(e.getKey());
                headers.add(e.getValue());
            }
        });
        Relay x = new Relay(ctx, req.method() + " " + req.uri(), headers, body, model, session);
        ctx.response().closeHandler(c -> x.clientGone());
        x.dispatch(null);
    }

    /** Whether an answer's head says it is a stream of Server-Sent Events. */
    private static boolean isStream(ClusterFrame head) {
        if (head == null) return false;
        for (int i = 0; i < head.headers().size(); i += 2)
            if (head.headers().get(i).equalsIgnoreCase("content-type")
                    && head.headers().get(i + 1).toLowerCase(Locale.ROOT).startsWith("text/event-stream")) return true;
        return false;
    }

    private void onFrame(Message<ClusterFrame> msg) {
        ClusterFrame f = msg.body();
        Relay x = relays.get(f.id());
        if (x != null) x.onFrame(f);
    }

    /** What became of a request whose engine node was lost. */
    private enum Lost { ENDED, RESENT, REFUSED }

    /** One client request relayed to an engine node. */
    private final class Relay {
        /** The exchange id of the current attempt: each node tried gets a new one, so a late answer is ignored. */
        String id;
        final RoutingContext ctx;
        final HttpServerResponse resp;
        final String request, model, session;
        final List<String> headers;
        final byte[] body;
        final Set<String> tried = new HashSet<>();
        EngineTable.Engine engine;
        /** The answer's head, kept until the first bytes or the end. */
        ClusterFrame head;
        boolean answered, done;
        /** An SSE answer's limits.streamBufferBytes when it started (0: not a stream); see {@link #notReading}. */
        int streamBufferBytes;
        String lastFailure;
        /** The path as routed: an error after the stream started takes the shape of its API. */
        final String path;
        /** SSE events relayed so far (blank lines that end one), and whether the last byte relayed was a newline. */
        int events;
        boolean newline;

        Relay(RoutingContext ctx, String request, List<String> headers, byte[] body, String model, String session) {
            this.ctx = ctx;
            this.resp = ctx.response();
            this.request = request;
            this.headers = headers;
            this.body = body;
            this.model = model;
            this.session = session;
            this.path = HttpVerticle.routed(ctx);
        }

        /** Sends the request to the best node not yet tried; {@code why} says why the previous one was left. */
        void dispatch(String why) {
            if (done) return;
            if (why != null) {
                retried.increment();
                lastFailure = why;
            }
            EngineTable.Choice c = table.pick(model, session, tried);
            if (c.engine() == null) {
                finish();
                String m = c.message() + (lastFailure != null ? "; last failure: " + lastFailure : "");
                if (c.status() == 503) LOG.warn("{}{} answered 503: {}", HttpVerticle.named(ctx), request, m);
                else LOG.info("{}{} rejected with {}: {}", HttpVerticle.named(ctx), request, c.status(), m);
                error(resp, path, switch (c.status()) {
                    case 429 -> new ApiException(429, "rate_limit_exceeded", "queue_full", null, m, c.retryAfter());
                    // no engine serves the model: the gateway's own 404, naming the models the cluster serves
                    case 404 -> new ApiException(404, "invalid_request_error", "model_not_found", "model", m, null);
                    default -> new ApiException(c.status(), "unavailable_error", "no_engine", null, m, c.retryAfter());
                });
                return;
            }
            String previous = id;
            engine = c.engine();
            id = Long.toHexString(ThreadLocalRandom.current().nextLong());
            if (why != null) LOG.info("cluster: request {} ({}) re-sent to engine node '{}' as {}: {}", previous, request,
                    engine.name(), id, why);
            tried.add(engine.node);
            engine.inflight++;
            engine.routed++;
            relays.put(id, this);
            EngineTable.Engine target = engine;
            String attempt = id;
            vertx.eventBus().request(EngineNode.address(engine.node), ClusterFrame.gen(id, address, request, headers, body), ACK)
                    .onFailure(t -> {
                        if (!attempt.equals(id) || answered || done) return;
                        release();
                        // a slow node may still start it: tell it to drop this attempt
                        vertx.eventBus().send(EngineNode.address(target.node), ClusterFrame.cancel(attempt,
                                "the gateway did not hear it take the request in time and sent it elsewhere"));
                        LOG.warn("cluster: engine node '{}' did not take request {}: {}", target.name(), id, t.getMessage());
                        dispatch("engine node '" + target.name() + "' did not take it: " + t.getMessage());
                    });
        }

        void onFrame(ClusterFrame f) {
            if (done) return;
            switch (f.kind()) {
                case HEAD -> {
                    answered = true;
                    head = f;
                }
                case DATA, END -> {
                    if (resp.ended()) {
                        // answered here meanwhile: a request relayed without its body got 408 when that body was late
                        cancel("the gateway answered the request itself meanwhile");
                        return;
                    }
                    if (f.nanos() != 0 && bootId != null && bootId.equals(engine.ann.getString("bootId")))
                        relayLatency.record(Duration.ofNanos(System.nanoTime() - f.nanos()));
                    boolean end = f.kind() == ClusterFrame.Kind.END;
                    if (end && head != null && (head.status() == 429 || head.status() == 503) && !resp.headWritten()) {
                        // the node filled up, or began shutting down, since it last said; another one may take it
                        release();
                        EngineTable.Choice c = table.pick(model, session, tried);
                        if (c.engine() != null) {
                            String why = head.status() == 429 ? "was full" : "could not take it (503: shutting down or not ready)";
                            head = null;
                            answered = false;
                            dispatch("engine node '" + engine.name() + "' " + why);
                            return;
                        }
                        writeHead();
                        resp.end(Buffer.buffer(f.data()));
                        finish();
                        return;
                    }
                    if (!resp.headWritten()) {
                        writeHead();
                        if (!end) {
                            resp.setChunked(true);
                            HttpVerticle.closeAfterUnframedAnswer(ctx);
                        }
                        if (!end && isStream(head)) {
                            // Netty queues what the socket does not take; past this many bytes the queue reports full
                            streamBufferBytes = config.get().streamBufferBytes();
                            resp.setWriteQueueMaxSize(streamBufferBytes);
                        }
                    }
                    if (end) {
                        finish();
                        if (!resp.ended() && !resp.closed()) resp.end(Buffer.buffer(f.data()));
                    } else if (f.data().length > 0 && !resp.closed()) {
                        count(f.data());
                        resp.write(Buffer.buffer(f.data()));
                        // a client that stops reading would otherwise have its whole answer buffered here
                        if (streamBufferBytes > 0 && resp.writeQueueFull()) notReading();
                    }
                }
                case FAIL -> {
                    finish();
                    fail(new ApiException(f.status(), "server_error", "engine_failed", null, f.text(), null));
                }
                default -> LOG.warn("cluster: unexpected frame {} from engine node '{}'", f, engine.name());
            }
        }

        private void writeHead() {
            if (resp.closed()) return;
            resp.setStatusCode(head != null ? head.status() : 200);
            if (head != null) {
                // the engine node decided CORS for what it answered (preflights included): its headers alone count
                resp.headers().remove("Access-Control-Allow-Origin").remove("Vary");
                for (int i = 0; i < head.headers().size(); i += 2) resp.putHeader(head.headers().get(i), head.headers().get(i + 1));
                resp.putHeader(ENGINE_HEADER, head.address());
            }
        }

        /**
         * The node went away: a request it had not answered yet goes elsewhere; one it was answering ends with an error.
         * Returns which of these became of it.
         */
        Lost engineLost(String why) {
            if (done) return Lost.ENDED;
            // a node that fell silent may still be in the cluster and running it: it stops what the gateway gave up on
            // (to a node that left, the frame goes nowhere)
            vertx.eventBus().send(EngineNode.address(engine.node), ClusterFrame.cancel(id, "the gateway gave it up: " + why));
            if (!answered && !resp.headWritten()) {
                release();
                dispatch(why);
                // dispatch ends the request with 503 (or 429) when no other node can take it
                return done ? Lost.REFUSED : Lost.RESENT;
            }
            finish();
            boolean streaming = resp.headWritten();
            fail(new ApiException(502, "server_error", "engine_lost", null,
                    why + (streaming ? " while streaming this response" : " before this response was complete"), null));
            return Lost.ENDED;
        }

        /** Counts the SSE events in what is relayed: a blank line ends one (the JSON of a data line has no newline). */
        private void count(byte[] data) {
            for (byte b : data) {
                if (b == '\n' && newline) events++;
                newline = b == '\n';
            }
        }

        /**
         * Ends the answer with e: its error body before the head went out, else the frame that ends a stream in the shape
         * of the request's API (Anthropic's or the Responses API's error event, OpenAI's data frame), as a single server
         * ends it.
         */
        private void fail(ApiException e) {
            if (resp.ended() || resp.closed()) return;
            if (resp.headWritten()) resp.end(HttpVerticle.streamFailure(path, e, events));
            else error(resp, path, e);
        }

        void clientGone() {
            if (done) return;
            cancel("the client went away at the gateway");
            if (engine != null) LOG.info("{}{} (relayed as {}): client disconnected; cancelling it on engine node '{}'",
                    HttpVerticle.named(ctx), request, id, engine.name());
        }

        /**
         * A streaming client that does not read: more than limits.streamBufferBytes of its answer wait unsent here. As
         * on a single server, the request is cancelled (its engine node stops it at the next step boundary, as for a
         * disconnect) and the connection is closed.
         */
        private void notReading() {
            cancel("the client did not read its stream at the gateway");
            LOG.warn("{}{} (relayed as {}): the client is not reading its stream: more than {} bytes wait unsent"
                    + " (limits.streamBufferBytes); cancelling it on engine node '{}' and closing the connection", HttpVerticle.named(ctx),
                    request, id, streamBufferBytes, engine.name());
            ctx.request().connection().close();
        }

        /** The shutdown's grace period is over: 503 server_shutting_down (an error event on a stream), cancelled on its node. */
        void shutDown(int graceSeconds) {
            if (done) return;
            cancel("the gateway is shutting down");
            fail(new ApiException(503, "unavailable_error", HttpVerticle.SHUTTING_DOWN, null, "the gateway is shutting"
                    + " down and this request did not end within the grace period (server.shutdownGraceSeconds "
                    + graceSeconds + "); retry once it is back or through another gateway", 5));
        }

        /** Ends the relay and has its engine node cancel the request; why goes into the node's log. */
        private void cancel(String why) {
            finish();
            if (engine != null) vertx.eventBus().send(EngineNode.address(engine.node), ClusterFrame.cancel(id, why));
        }

        private void release() {
            relays.remove(id);
            if (engine != null) engine.inflight--;
        }

        private void finish() {
            if (done) return;
            done = true;
            if (relays.get(id) == this) release();
        }
    }

    /** Set once the gateway began shutting down ({@link #drain}): new requests get 503 server_shutting_down. */
    private volatile boolean draining;

    /**
     * Shuts the gateway down as a single server does: new requests get 503 server_shutting_down (and /health 503) at
     * once, the requests it relays may finish within graceSeconds, and those still running then end with that 503 (an
     * error event on a stream that started) and are cancelled on their engine nodes. Completes when none is left.
     */
    public Future<Void> drain(int graceSeconds) {
        Promise<Void> done = Promise.promise();
        context.runOnContext(v -> {
            draining = true;
            LOG.info("shutting down: new requests are refused with 503; {} relayed request(s) may finish within {} s"
                    + " (server.shutdownGraceSeconds)", relays.size(), graceSeconds);
            waitForRelays(System.nanoTime() + graceSeconds * 1_000_000_000L, graceSeconds, done);
        });
        return done.future();
    }

    private void waitForRelays(long deadline, int graceSeconds, Promise<Void> done) {
        if (relays.isEmpty()) {
            done.tryComplete();
            return;
        }
        if (System.nanoTime() < deadline) {
            vertx.setTimer(20, t -> waitForRelays(deadline, graceSeconds, done));
            return;
        }
        List<Relay> left = new ArrayList<>(relays.values());
        LOG.warn("shutting down: {} relayed request(s) still running after {} s (server.shutdownGraceSeconds); ending them"
                + " with 503 and cancelling them on their engine nodes", left.size(), graceSeconds);
        for (Relay x : left) x.shutDown(graceSeconds);
        done.tryComplete();
    }

    @Override
    public Future<?> stop() {
        if (timer != -1) vertx.cancelTimer(timer);
        if (heads != null) heads.stop();
        return server != null ? server.close() : Future.succeededFuture();
    }
}
