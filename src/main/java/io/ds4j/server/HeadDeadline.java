package io.ds4j.server;

import io.vertx.core.Handler;
import io.vertx.core.Vertx;
import io.vertx.core.http.HttpConnection;
import io.vertx.core.http.HttpServer;
import io.vertx.core.http.HttpServerOptions;
import io.vertx.core.http.HttpServerRequest;
import io.vertx.core.net.impl.ConnectionBase;
import io.vertx.core.spi.metrics.TCPMetrics;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.IntSupplier;

/**
 * Closes an HTTP/1.x connection that goes {@code limits.headerReadTimeoutMs} without a complete request head: after it
 * opened, or after its last request and answer were done. A client that sends a request line and some headers and
 * then nothing, or connects and sends nothing, would otherwise hold its connection (and the headers read so far)
 * forever: neither Vert.x nor Netty bounds the time a request's head may take, and Vert.x's idle timeouts would also
 * close a stream that is silent while a long prompt is prefilled. A connection with a request in progress — its body
 * arriving (bounded by limits.bodyReadTimeoutMs), or its answer being generated or streamed, however long and silent —
 * is never closed here; an idle keep-alive connection is, once it has been idle that long (clients reconnect, as they
 * do after any server's keep-alive timeout).
 *
 * <p>Vert.x offers no event for a head's first bytes, so an idle connection cannot be told from one whose next head is
 * stalled: both count as waiting for a head. The connections are swept every quarter of the timeout; one is closed once
 * it has been seen waiting for at least the timeout, so within 1.5 times it. It needs the server's connection handler
 * to see every connection at its accept, i.e. cleartext HTTP/2 detection off: with it on, Vert.x hands over a
 * connection only once a request has come on it. One instance per HTTP server, used on that server's event loop only.
 */
public final class HeadDeadline {
    private static final Logger LOG = LoggerFactory.getLogger(HeadDeadline.class);

    private final Vertx vertx;
    private final IntSupplier timeoutMs;
    private final Map<HttpConnection, Waiting> open = new HashMap<>();
    private long timer = -1;
    /** When the pending sweep runs (System.nanoTime), while timer is set. */
    private long due;
    private boolean stopped;

    /** A connection's state: its request in progress, and since when it is known to wait for a head (or -1). */
    private static final class Waiting {
        HttpServerRequest current;
        long since;
        boolean served;

        Waiting(long since) {
            this.since = since;
        }
    }

    /**
     * The longest request line (method, target, version) both fronts read, in bytes: Vert.x's default, set here so
     * that the 414 for a longer one can name it.
     */
    public static final int MAX_REQUEST_LINE = HttpServerOptions.DEFAULT_MAX_INITIAL_LINE_LENGTH;

    /**
     * The most bytes a request's header lines may take all together (the request line aside): Vert.x's default, set
     * here so that the refusal of more can name it.
     */
    public static final int MAX_HEADERS = HttpServerOptions.DEFAULT_MAX_HEADER_SIZE;

    /**
     * @param timeoutMs the current limits.headerReadTimeoutMs (read at every sweep and when a connection opens: a reload
     *                  that lowers it applies to connections open then at the next sweep, to new ones from their accept)
     */
    public HeadDeadline(Vertx vertx, IntSupplier timeoutMs) {
        this.vertx = vertx;
        this.timeoutMs = timeoutMs;
    }

    /**
     * An HTTP front whose every connection and request head this deadline sees: HTTP/1.x only (cleartext HTTP/2
     * detection off, see the class comment), no compression (answers are small JSON or token streams), TCP_NODELAY
     * (streamed tokens go out at once), and each connection's request framing checked ({@link RequestFraming}: a
     * request with both Content-Length and Transfer-Encoding, or a malformed chunked body, is refused and its connection
     * closed; so is a chunked body past server.maxBodyBytes, with 413) and its own closes marked ({@link BodyDeadline#install}).
     * Both fronts, a single server and a cluster gateway, are made here.
     * @param port     the port (0 one chosen by the system; -1 a random one shared by several instances)
     * @param requests every request, after its head was noted
     * @param invalid  every request Vert.x could not parse or whose framing is refused, after its head was noted
     * @param maxBodyBytes the current server.maxBodyBytes: a chunked body past it is refused as it is framed
     * @param rejected counts a refused chunked body under its error code (answered without reaching the handlers)
     * @param bodies   the front's error body for a refused chunked body, by the request's path
     */
    public HttpServer server(String host, int port, Handler<HttpServerRequest> requests, Handler<HttpServerRequest> invalid,
                             IntSupplier maxBodyBytes, java.util.function.Consumer<String> rejected, ApiException.Bodies bodies) {
        HttpServerOptions options = new HttpServerOptions().setHost(host).setPort(port).setCompressionSupported(false)
                .setTcpNoDelay(true).setHttp2ClearTextEnabled(false).setMaxInitialLineLength(MAX_REQUEST_LINE).setMaxHeaderSize(MAX_HEADERS);
        return vertx.createHttpServer(options)
                .connectionHandler(c -> {
                    measured(c);
                    RequestFraming.install(c, options, maxBodyBytes, rejected, bodies);
                    BodyDeadline.install(c);
                    opened(c);
                })
                .requestHandler(req -> {
                    head(req);
                    requests.handle(req);
                })
                .invalidRequestHandler(req -> {
                    head(req);
                    invalid.handle(req);
                });
    }

    /**
     * Gives a connection that Vert.x accepted without its connection metric one from the metrics it reports to. Vert.x
     * 5.0.7 reads the listening server's metrics when it accepts a connection, and creates them only once the socket's
     * bind has completed: a connection accepted in between has none while the HTTP layer measures it, so its first
     * request failed inside Vert.x (a NullPointerException in the metrics, no answer until the head deadline closed the
     * connection) and so did its close. A connection that has its metric, or whose server measures nothing, is left.
     */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static void measured(HttpConnection c) {
        if (c instanceof ConnectionBase b && b.metric() == null && b.metrics() instanceof TCPMetrics m) {
            b.metric(m.connected(b.remoteAddress(), b.remoteName()));
            LOG.debug("connection from {} accepted without its metric (the server's metrics were still being made): given one",
                    b.remoteAddress());
        }
    }

    /** A connection was accepted (the HTTP server's connection handler): it waits for its first head from now. */
    public void opened(HttpConnection c) {
        if (stopped) return;
        open.put(c, new Waiting(System.nanoTime()));
        c.closeHandler(v -> open.remove(c));
        long period = period();
        // a sweep scheduled under a longer timeout (before a reload lowered it) would come too late for this connection
        if (timer != -1 && System.nanoTime() + period * 1_000_000 < due) {
            vertx.cancelTimer(timer);
            timer = -1;
        }
        if (timer == -1) schedule();
    }

    /** A request's head has arrived (the HTTP server's request handler): its connection is busy until it is done. */
    public void head(HttpServerRequest req) {
        Waiting w = open.get(req.connection());
        if (w == null) return;
        w.current = req;
        w.since = -1;
        w.served = true;
    }

    /** Stops sweeping (the server is closing). */
    public void stop() {
        stopped = true;
        if (timer != -1) vertx.cancelTimer(timer);
        timer = -1;
        open.clear();
    }

    /** The sweep period: a quarter of the current timeout (ms, at least 25). */
    private long period() {
        return Math.max(25, timeoutMs.getAsInt() / 4);
    }

    private void schedule() {
        long period = period();
        due = System.nanoTime() + period * 1_000_000;
        timer = vertx.setTimer(period, id -> sweep());
    }

    private void sweep() {
        timer = -1;
        if (stopped) return;
        long now = System.nanoTime(), limit = timeoutMs.getAsInt();
        List<Map.Entry<HttpConnection, Waiting>> late = new ArrayList<>();
        for (Map.Entry<HttpConnection, Waiting> e : open.entrySet()) {
            Waiting w = e.getValue();
            HttpServerRequest r = w.current;
            boolean busy = r != null && !r.response().closed() && !(r.isEnded() && r.response().ended());
            if (busy) {
                w.since = -1;
            } else if (w.since < 0) {
                w.since = now;  // done since the last sweep at the latest
            } else if ((now - w.since) / 1_000_000 >= limit) {
                late.add(e);
            }
        }
        for (Map.Entry<HttpConnection, Waiting> e : late) {
            HttpConnection c = e.getKey();
            open.remove(c);
            if (e.getValue().served) {
                // most often an idle keep-alive connection, which clients expect to be closed some time
                LOG.debug("connection from {}: no request head within {} ms after its last answer"
                        + " (limits.headerReadTimeoutMs); closing it", c.remoteAddress(), limit);
            } else {
                LOG.info("connection from {}: no complete request head within {} ms after it opened"
                        + " (limits.headerReadTimeoutMs); closing it", c.remoteAddress(), limit);
            }
            c.close();
        }
        if (!open.isEmpty()) schedule();
    }
}
