package io.ds4j.gpu;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * {@link SeqViews}: the element layout of {@code ds4j_seq_view} (include/ds4j/ds4j_gpu.h), and that replacing the ring
 * or store address of one element (the control's copies, HipBackend's convertGroup) changes those 8 bytes only.
 */
class SeqViewsTest {
    @Test
    void layoutAndReplacedAddresses() {
        SeqViews v = new SeqViews(Arena.ofAuto(), 3);
        v.set(1, 123_456_789_012L, 5, 7, 0x1000, 0x2000, 0x3000, 140);
        MemorySegment h = v.host();
        long o = SeqViews.BYTES;
        assertEquals(123_456_789_012L, h.get(ValueLayout.JAVA_LONG, o));
        assertEquals(5, h.get(ValueLayout.JAVA_INT, o + 8));
        assertEquals(7, h.get(ValueLayout.JAVA_INT, o + 12));
        assertEquals(0x1000, h.get(ValueLayout.JAVA_LONG, o + 16));
        assertEquals(0x2000, h.get(ValueLayout.JAVA_LONG, o + 24));
        assertEquals(0x3000, h.get(ValueLayout.JAVA_LONG, o + 32));
        assertEquals(140, h.get(ValueLayout.JAVA_INT, o + 40));
        byte[] before = h.toArray(ValueLayout.JAVA_BYTE);
        v.ring(1, 0xAAAA).store(1, 0xBBBB);
        byte[] after = h.toArray(ValueLayout.JAVA_BYTE);
        assertEquals(0xAAAA, h.get(ValueLayout.JAVA_LONG, o + 16));
        assertEquals(0xBBBB, h.get(ValueLayout.JAVA_LONG, o + 32));
        assertEquals(0x2000, h.get(ValueLayout.JAVA_LONG, o + 24), "ring2 kept");
        for (int i = 0; i < before.length; i++)
            if (i < o + 16 || i >= o + 24 && i < o + 32 || i >= o + 40)
                assertEquals(before[i], after[i], "byte " + i + " outside the two addresses");
    }

    @Test
    void tooSmallSegmentIsRefused() {
        MemorySegment small = Arena.ofAuto().allocate(SeqViews.BYTES, 8);
        assertThrows(IllegalArgumentException.class, () -> new SeqViews(small, 2));
    }
}
