package io.ds4j.server;

import io.ds4j.json.Json;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFutureListener;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelOutboundHandlerAdapter;
import io.netty.channel.ChannelPipeline;
import io.netty.channel.ChannelPromise;
import io.netty.util.AttributeKey;
import io.vertx.core.http.HttpConnection;
import io.vertx.core.http.HttpHeaders;
import io.vertx.core.http.HttpServerRequest;
import io.vertx.core.http.HttpServerResponse;
import io.vertx.core.net.impl.ConnectionBase;
import io.vertx.ext.web.RoutingContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The deadline of a request's body, {@code limits.bodyReadTimeoutMs} after its headers: a client that sends part of a
 * body and stalls would otherwise hold its connection, and what was read of the body, forever. A body still incomplete
 * then gets 408 request_timeout and its connection is closed (what remains of the body could no longer be told from a
 * next request). A request already answered without (all of) its body — a 401 for a wrong key, a 404, GET /health sent
 * with a body, a body over the size limit that is still being discarded — only has its connection closed: the answer
 * went out, and the connection cannot carry a next request before the body ends. A client that closes the connection
 * first (as curl does after a 413) ends the deadline at once, and the log says the client closed it: Vert.x tells a
 * request of its connection's close only while its answer is being written, so the deadline listens to the
 * connection's channel itself, where a handler put in when the connection opened ({@link #install}) marks the closes
 * the server begins, so that those are never reported as the client's. Used by both HTTP fronts (a single server and
 * a cluster gateway), on the request's event loop.
 */
public final class BodyDeadline {
    private static final Logger LOG = LoggerFactory.getLogger(BodyDeadline.class);
    /** Context keys: the request's {@link Watch}, and whether its deadline passed. */
    private static final String WATCH = "ds4j.bodyWatch", PASSED = "ds4j.bodyLate";

    /**
     * A request's deadline while it runs: its timer and the listener on its connection's close, both dropped together
     * once the body ends, the deadline passes or the connection closes, so that neither holds the request after that.
     */
    private static final class Watch {
        long timer = -1;
        Channel channel;
        ChannelFutureListener closed;
        boolean over;

        /** Drops the timer and the listener; false when they were already dropped. */
        boolean end(RoutingContext ctx) {
            if (over) return false;
            over = true;
            ctx.vertx().cancelTimer(timer);
            if (channel != null) channel.closeFuture().removeListener(closed);
            closed = null;
            return true;
        }
    }

    /** Channel attribute: set once the server began to close the connection ({@link ServerCloses}). */
    private static final AttributeKey<Boolean> SERVER_CLOSED = AttributeKey.valueOf("ds4j.serverClosed");

    private BodyDeadline() {}

    /**
     * Puts the handler that marks the server's own closes into a connection's pipeline; both fronts call it when a
     * connection opens, before any request. Where the connection is not the kind expected (a Vert.x whose internals
     * changed), nothing is put in and its requests' deadlines rely on their timers alone.
     */
    static void install(HttpConnection connection) {
        ChannelPipeline p = connection instanceof ConnectionBase c ? c.channelHandlerContext().pipeline() : null;
        if (p == null || p.get("handler") == null) return;
        p.addBefore("handler", "ds4jServerCloses", new ServerCloses());
    }

    /**
     * Marks a close the server begins without passing a close through the pipeline: a {@link LingeringClose}, which
     * shuts the server's side and then may end at the client's close.
     */
    static void serverCloses(Channel channel) {
        channel.attr(SERVER_CLOSED).set(true);
    }

    /**
     * Marks a close that passes through the pipeline, which is how every close the server begins (Vert.x's, this
     * server's, Netty's close-after-write) travels; a client's close (the end of the stream, a reset) closes the
     * channel from its transport without passing here. A close that must linger is handed to {@link LingeringClose}.
     */
    private static final class ServerCloses extends ChannelOutboundHandlerAdapter {
        @Override
        public void close(ChannelHandlerContext ctx, ChannelPromise promise) throws Exception {
            ctx.channel().attr(SERVER_CLOSED).set(true);
            if (!LingeringClose.takesOver(ctx, promise)) super.close(ctx, promise);
        }
    }

    /**
     * Sets the deadline of a request that declares a body (Content-Length above 0, or Transfer-Encoding); once per
     * request. A route that reads the body calls {@link #arrived} when it ends; for the others the deadline finds the
     * body complete when it fires, or closes the connection.
     * @param refused counts a 408 (the server's metrics), or does nothing
     * @param bodies  the front's error body for the request's path
     */
    public static void watch(RoutingContext ctx, int timeoutMs, Runnable refused, ApiException.Bodies bodies) {
        HttpServerRequest req = ctx.request();
        if (ctx.get(WATCH) != null || !declaresBody(req)) return;
        Watch w = new Watch();
        ctx.put(WATCH, w);
        w.timer = ctx.vertx().setTimer(timeoutMs, id -> {
            if (w.end(ctx) && !closing(req)) timedOut(ctx, timeoutMs, refused, bodies);
        });
        // without the handler a close could not be told to be the client's: such a request is left to its timer
        if (req.connection() instanceof ConnectionBase c && c.channelHandlerContext().pipeline().get(ServerCloses.class) != null) {
            w.channel = c.channel();
            // Netty runs it on the channel's event loop, which is the request's
            w.closed = f -> {
                if (w.end(ctx)) closed(ctx, w.channel.hasAttr(SERVER_CLOSED));
            };
            w.channel.closeFuture().addListener(w.closed);
        }
    }

    /**
     * Whether the server already decided to close the request's connection (a {@link LingeringClose} after a 413 for a
     * chunked body or a chunk that cannot be read, which logged that decision): the deadline then has nothing to answer
     * and must not close the connection itself, which would cut the lingering short and reset a client still sending.
     */
    private static boolean closing(HttpServerRequest req) {
        return req.connection() instanceof ConnectionBase c && c.channel().hasAttr(SERVER_CLOSED);
    }

    /** Whether a request's headers say a body follows (a request without either has none, RFC 9112 section 6.3). */
    static boolean declaresBody(HttpServerRequest req) {
        if (req.getHeader(HttpHeaders.TRANSFER_ENCODING) != null) return true;
        String cl = req.getHeader(HttpHeaders.CONTENT_LENGTH);
        return cl != null && !cl.trim().equals("0");
    }

    /** The body has ended (or failed): its deadline no longer applies. */
    public static void arrived(RoutingContext ctx) {
        Watch w = ctx.get(WATCH);
        if (w != null) w.end(ctx);
    }

    /** Whether the deadline passed: what arrives from then on is discarded. */
    public static boolean passed(RoutingContext ctx) {
        return ctx.get(PASSED) != null;
    }

    /** How much of a request's body came: "3 of the 100 bytes declared", "40 bytes (chunked)". */
    private static String got(HttpServerRequest req) {
        String cl = req.getHeader(HttpHeaders.CONTENT_LENGTH);
        return req.bytesRead() + (cl != null && req.getHeader(HttpHeaders.TRANSFER_ENCODING) == null
                ? " of the " + cl.trim() + " bytes declared" : " bytes (chunked)");
    }

    /**
     * The connection closed before the body ended and before the deadline. After an answer that did not wait for the
     * body, a close by the client is said here; one the server began is said where it was decided (a chunk that
     * cannot be read, for one), so only the debug log has it again. Before an answer, the route that reads the body is
     * told by Vert.x and ends the request itself.
     * @param byServer whether the server began the close
     */
    private static void closed(RoutingContext ctx, boolean byServer) {
        HttpServerRequest req = ctx.request();
        HttpServerResponse resp = ctx.response();
        if (req.isEnded() || !resp.headWritten()) return;
        if (byServer)
            LOG.debug("{}{} {}: answered with {} before its body arrived; the server closed the connection, {} came",
                    HttpVerticle.named(ctx), req.method(), req.path(), resp.getStatusCode(), got(req));
        else
            LOG.info("{}{} {}: answered with {} before its body arrived; the client closed the connection, {} came",
                    HttpVerticle.named(ctx), req.method(), req.path(), resp.getStatusCode(), got(req));
    }

    private static void timedOut(RoutingContext ctx, int timeoutMs, Runnable refused, ApiException.Bodies bodies) {
        HttpServerRequest req = ctx.request();
        HttpServerResponse resp = ctx.response();
        if (req.isEnded()) return;
        // an answer written is closed() to Vert.x once it ended where the client asked for Connection: close, though
        // Vert.x leaves the connection open while the body is pending: it is closed here all the same
        if (!resp.headWritten() && resp.closed()) return;
        ctx.put(PASSED, true);
        String got = got(req);
        if (resp.headWritten()) {
            LOG.info("{}{} {}: answered with {} before its body arrived; the rest of the body did not come within {} ms"
                    + " (limits.bodyReadTimeoutMs), {} came; closing the connection", HttpVerticle.named(ctx), req.method(), req.path(),
                    resp.getStatusCode(), timeoutMs, got);
            req.connection().close();
            return;
        }
        ApiException e = new ApiException(408, "invalid_request_error", "request_timeout", null, "the request body did not"
                + " arrive in time: " + got + " came within " + timeoutMs + " ms (limits.bodyReadTimeoutMs); the connection is"
                + " closed", null);
        refused.run();
        LOG.info("{}{} {} rejected with 408: the body did not arrive within {} ms (limits.bodyReadTimeoutMs), {} came;"
                + " closing the connection", HttpVerticle.named(ctx), req.method(), req.path(), timeoutMs, got);
        // written before the close, as for a malformed request: the client learns why its connection ends
        resp.setStatusCode(408).putHeader(HttpHeaders.CONTENT_TYPE, "application/json").putHeader(HttpHeaders.CONNECTION, "close")
                .end(Json.write(bodies.of(HttpVerticle.decodedPath(ctx), e))).onComplete(v -> req.connection().close());
    }
}
