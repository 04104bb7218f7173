package io.ds4j.server;

import io.vertx.core.http.HttpHeaders;
import io.vertx.core.http.HttpServerRequest;
import io.vertx.core.http.HttpServerResponse;
import io.vertx.ext.web.RoutingContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The deadline of a request's body, {@code limits.bodyReadTimeoutMs} after its headers: a client that sends part of a
 * body and stalls would otherwise hold its connection, and what was read of the body, forever. A body still incomplete
 * then gets 408 request_timeout and its connection is closed (what remains of the body could no longer be told from a
 * next request). A request already answered without (all of) its body — a 401 for a wrong key, a 404, GET /health sent
 * with a body, a body over the size limit that is still being discarded — only has its connection closed: the answer
 * went out, and the connection cannot carry a next request before the body ends. Used by both HTTP fronts (a single
 * server and a cluster gateway), on the request's event loop.
 */
public final class BodyDeadline {
    private static final Logger LOG = LoggerFactory.getLogger(BodyDeadline.class);
    /** Context keys: the deadline's timer, and whether it passed. */
    private static final String TIMER = "ds4j.bodyTimer", PASSED = "ds4j.bodyLate";

    private BodyDeadline() {}

    /**
     * Sets the deadline of a request that declares a body (Content-Length above 0, or Transfer-Encoding); once per
     * request. A route that reads the body calls {@link #arrived} when it ends; for the others the deadline finds the
     * body complete when it fires, or closes the connection.
     * @param refused counts a 408 (the server's metrics), or does nothing
     * @param bodies  the front's error body for the request's path
     */
    public static void watch(RoutingContext ctx, int timeoutMs, Runnable refused, ApiException.Bodies bodies) {
        HttpServerRequest req = ctx.request();
        if (ctx.get(TIMER) != null || !declaresBody(req)) return;
        ctx.put(TIMER, ctx.vertx().setTimer(timeoutMs, id -> timedOut(ctx, timeoutMs, refused, bodies)));
    }

    /** Whether a request's headers say a body follows (a request without either has none, RFC 9112 section 6.3). */
    static boolean declaresBody(HttpServerRequest req) {
        if (req.getHeader(HttpHeaders.TRANSFER_ENCODING) != null) return true;
        String cl = req.getHeader(HttpHeaders.CONTENT_LENGTH);
        return cl != null && !cl.trim().equals("0");
    }

    /** The body has ended (or failed): its deadline no longer applies. */
    public static void arrived(RoutingContext ctx) {
        Long timer = ctx.get(TIMER);
        if (timer != null) ctx.vertx().cancelTimer(timer);
    }

    /** Whether the deadline passed: what arrives from then on is discarded. */
    public static boolean passed(RoutingContext ctx) {
        return ctx.get(PASSED) != null;
    }

    private static void timedOut(RoutingContext ctx, int timeoutMs, Runnable refused, ApiException.Bodies bodies) {
        HttpServerRequest req = ctx.request();
        HttpServerResponse resp = ctx.response();
        if (req.isEnded() || resp.closed()) return;
        ctx.put(PASSED, true);
        String cl = req.getHeader(HttpHeaders.CONTENT_LENGTH);
        String got = req.bytesRead() + (cl != null && req.getHeader(HttpHeaders.TRANSFER_ENCODING) == null
                ? " of the " + cl.trim() + " bytes declared" : " bytes (chunked)");
        if (resp.headWritten()) {
            LOG.info("{} {}: answered with {} before its body arrived; the rest of the body did not come within {} ms"
                    + " (limits.bodyReadTimeoutMs), {} came; closing the connection", req.method(), req.path(),
                    resp.getStatusCode(), timeoutMs, got);
            req.connection().close();
            return;
        }
        ApiException e = new ApiException(408, "invalid_request_error", "request_timeout", null, "the request body did not"
                + " arrive in time: " + got + " came within " + timeoutMs + " ms (limits.bodyReadTimeoutMs); the connection is"
                + " closed", null);
        refused.run();
        LOG.info("{} {} rejected with 408: the body did not arrive within {} ms (limits.bodyReadTimeoutMs), {} came;"
                + " closing the connection", req.method(), req.path(), timeoutMs, got);
        // written before the close, as for a malformed request: the client learns why its connection ends
        resp.setStatusCode(408).putHeader(HttpHeaders.CONTENT_TYPE, "application/json").putHeader(HttpHeaders.CONNECTION, "close")
                .end(Json.write(bodies.of(HttpVerticle.decodedPath(ctx), e))).onComplete(v -> req.connection().close());
    }
}
