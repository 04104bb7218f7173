package io.ds4j.server;

import io.vertx.core.buffer.Buffer;
import io.vertx.core.eventbus.MessageCodec;

/**
 * Passes objects between verticles of one JVM by reference: the engine and the HTTP verticles exchange requests and
 * events as Java objects, never serialised. The event bus is local (not clustered), so the wire methods are never used.
 */
public final class LocalCodec implements MessageCodec<Object, Object> {
    /** The codec's registered name; use it in {@code DeliveryOptions.setCodecName}. */
    public static final String NAME = "ds4j-local";

    @Override
    public void encodeToWire(Buffer buffer, Object o) {
        throw new UnsupportedOperationException("ds4j messages are local only");
    }

    @Override
    public Object decodeFromWire(int pos, Buffer buffer) {
        throw new UnsupportedOperationException("ds4j messages are local only");
    }

    @Override
    public Object transform(Object o) {
        return o;
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public byte systemCodecID() {
        return -1;
    }
}
