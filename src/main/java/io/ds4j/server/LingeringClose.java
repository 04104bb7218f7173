package io.ds4j.server;

import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.socket.DuplexChannel;
import io.netty.util.ReferenceCountUtil;
import io.netty.util.concurrent.ScheduledFuture;

import java.util.concurrent.TimeUnit;

/**
 * Closes a connection whose client may still be sending (an answer written before its body was read: a chunked body
 * past server.maxBodyBytes, a chunk that cannot be read): the server's side is shut once the answer is written, what
 * the client still sends is read and dropped, and the connection closes when the client closes it, after
 * {@link #QUIET_MS} without a byte, or after {@link #MOST_MS} in all. Closed at once instead, the kernel answers the
 * bytes still arriving with a reset, which can reach the client before it read the answer: the client then sees a
 * broken pipe or a reset connection where the server had sent it a 413 (RFC 9112 section 9.6 describes this close).
 * Runs on the channel's event loop. The close is marked as the server's ({@link BodyDeadline#serverCloses}), also
 * where the client's close ends it.
 */
final class LingeringClose {
    /** Milliseconds without a byte from the client after which the connection is closed. */
    static final long QUIET_MS = 2_000;
    /** Milliseconds after the answer by which the connection is closed, however the client sends. */
    static final long MOST_MS = 30_000;

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
        written.addListener(f -> {
            if (f.isSuccess()) c.shutOutput();
            else c.channel.close();
        });
    }

    private void shutOutput() {
        if (!(channel instanceof DuplexChannel d) || !channel.isActive()) {
            channel.close();
            return;
        }
        d.shutdownOutput().addListener(f -> {
            if (!f.isSuccess()) {
                channel.close();
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
            channel.closeFuture().addListener(x -> timer.cancel(false));
        });
    }

    /** Closes once quiet for QUIET_MS or past MOST_MS, else looks again when the earlier of the two comes. */
    private void check() {
        long now = System.nanoTime();
        long wait = Math.min(lastRead + TimeUnit.MILLISECONDS.toNanos(QUIET_MS), until) - now;
        if (wait <= 0) channel.close();
        else timer = channel.eventLoop().schedule(this::check, wait, TimeUnit.NANOSECONDS);
    }
}
