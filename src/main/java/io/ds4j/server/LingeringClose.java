package io.ds4j.server;

import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.ChannelPromise;
import io.netty.channel.socket.DuplexChannel;
import io.netty.util.AttributeKey;
import io.netty.util.ReferenceCountUtil;
import io.netty.util.concurrent.ScheduledFuture;
import io.vertx.core.http.HttpConnection;
import io.vertx.core.net.impl.ConnectionBase;

import java.util.concurrent.TimeUnit;

/**
 * Closes a connection whose client may still be sending (an answer written before its body was read: a chunked body
 * past server.maxBodyBytes, a chunk that cannot be read, a head refused while its body may still come): the server's
 * side is shut once the answer is written, what the client still sends is read and dropped, and the connection closes
 * when the client closes it, after {@link #QUIET_MS} without a byte, or after {@link #MOST_MS} in all. Closed at once
 * instead, the kernel answers the bytes still arriving with a reset, which can reach the client before it read the
 * answer: the client then sees a broken pipe or a reset connection where the server had sent it a 413 (RFC 9112 section
 * 9.6 describes this close). Any other close of the connection meanwhile (Vert.x's after an answer with Connection:
 * close) waits for the lingering's end. Runs on the channel's event loop. The close is marked as the server's
 * ({@link BodyDeadline#serverCloses}), also where the client's close ends it.
 */
final class LingeringClose {
    /** Milliseconds without a byte from the client after which the connection is closed. */
    static final long QUIET_MS = 2_000;
    /** Milliseconds after the answer by which the connection is closed, however the client sends. */
    static final long MOST_MS = 30_000;
    /**
     * Channel attribute: false once the next close is to linger ({@link #onClose}), true while one lingers; absent
     * otherwise.
     */
    private static final AttributeKey<Boolean> LINGER = AttributeKey.valueOf("ds4j.linger");

    private final Channel channel;
    private final long until;
    /** When the last dropped read came (System.nanoTime). */
    private long lastRead = System.nanoTime();
    private ScheduledFuture<?> timer;

    private LingeringClose(Channel channel) {
        this.channel = channel;
        this.until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(MOST_MS);
    }

    /** Begins the close once the answer is written (also when writing it failed: then at once). */
    static void after(ChannelFuture written) {
        LingeringClose c = new LingeringClose(written.channel());
        BodyDeadline.serverCloses(c.channel);
        c.channel.attr(LINGER).set(true);
        written.addListener(f -> {
            if (f.isSuccess()) c.shutOutput();
            else c.close();
        });
    }

    /**
     * Makes the next close of a Vert.x connection (Vert.x's own after the answer, or the caller's) a lingering one:
     * for a request refused by its head, whose client may still be sending its body or, after HTTP/2's preface, its
     * frames. Where the connection is not the kind expected (a Vert.x whose internals changed), it closes at once.
     */
    static void onClose(HttpConnection connection) {
        if (connection instanceof ConnectionBase c) c.channel().attr(LINGER).set(false);
    }

    /**
     * Called by the pipeline for every close that passes it: true when the close was taken over, its promise then
     * completed at the lingering's end; false for a close to pass on.
     */
    static boolean takesOver(ChannelHandlerContext ctx, ChannelPromise promise) {
        Boolean lingering = ctx.channel().attr(LINGER).get();
        if (lingering == null) return false;
        ctx.channel().closeFuture().addListener(f -> promise.trySuccess());
        // after what was written before it (an empty write completes once those are flushed)
        if (!lingering) after(ctx.writeAndFlush(Unpooled.EMPTY_BUFFER));
        return true;
    }

    /** Closes the channel now, past {@link #takesOver}. */
    private void close() {
        channel.attr(LINGER).set(null);
        channel.close();
    }

    private void shutOutput() {
        if (!(channel instanceof DuplexChannel d) || !channel.isActive()) {
            close();
            return;
        }
        d.shutdownOutput().addListener(f -> {
            if (!f.isSuccess()) {
                close();
                return;
            }
            // every byte from here on is dropped before the decoder (nothing after the answer is a request to read),
            // and a paused reader (Vert.x pauses one whose request it does not read) is read again
            channel.pipeline().addFirst("ds4jLinger", new ChannelInboundHandlerAdapter() {
                @Override
                public void channelRead(ChannelHandlerContext ctx, Object msg) {
                    ReferenceCountUtil.release(msg);
                    lastRead = System.nanoTime();
                }
            });
            channel.config().setAutoRead(true);
            channel.read();
            lastRead = System.nanoTime();
            check();
            channel.closeFuture().addListener(x -> {
                if (timer != null) timer.cancel(false);
            });
        });
    }

    /** Closes once quiet for QUIET_MS or past MOST_MS, else looks again when the earlier of the two comes. */
    private void check() {
        long now = System.nanoTime();
        long wait = Math.min(lastRead + TimeUnit.MILLISECONDS.toNanos(QUIET_MS), until) - now;
        if (wait <= 0) close();
        else timer = channel.eventLoop().schedule(this::check, wait, TimeUnit.NANOSECONDS);
    }
}
