package io.ds4j.gpu;

import java.util.Arrays;

/**
 * Which device (or the host) holds each routed expert, over D devices of one host: the expert-to-owner map of an
 * {@link ExpertPlacementPlan}. Immutable.
 *
 * <p>Per layer, the experts are split into D contiguous ranges in device order ({@link #rangeStart},
 * {@link #rangeEnd}); device d is the one that computes the experts of its range. Of its range, a prefix is resident
 * in the device's memory ({@link #resident}, experts {@link #rangeStart} .. {@link #residentEnd}−1); the rest of the
 * range is in host memory (owner {@link #HOST}). A range may be empty (fewer experts than devices). Everything but the
 * routed experts is replicated on every device and is not part of this map.
 */
public final class ExpertOwners {
    /** The owner of an expert kept in host memory. */
    public static final int HOST = -1;

    private final int devices;
    /** [layer][0..D]: device d's range is [bounds[l][d], bounds[l][d+1]); bounds[l][D] is the layer's expert count. */
    private final int[][] bounds;
    /** [layer][device]: experts resident on the device, counted from the start of its range. */
    private final int[][] resident;

    private ExpertOwners(int devices, int[][] bounds, int[][] resident) {
        this.devices = devices;
        this.bounds = bounds;
        this.resident = resident;
    }

    /**
     * The default map: the E experts of every layer in D ranges as equal as possible, device d owning
     * [⌊d·E/D⌋, ⌊(d+1)·E/D⌋), every expert resident.
     *
     * @param devices         D, at least 1
     * @param expertsPerLayer [layer]: the layer's routed experts E (≥ 0); no layers is allowed
     * @throws IllegalArgumentException for D &lt; 1 or a negative expert count
     */
    public static ExpertOwners contiguous(int devices, int[] expertsPerLayer) {
        if (devices < 1) throw new IllegalArgumentException("expert placement needs at least one device, got " + devices);
        int L = expertsPerLayer.length;
        int[][] bounds = new int[L][devices + 1], resident = new int[L][devices];
        for (int l = 0; l < L; l++) {
            long E = expertsPerLayer[l];
            if (E < 0) throw new IllegalArgumentException("layer " + l + " has " + E + " routed experts");
            for (int d = 0; d <= devices; d++) bounds[l][d] = (int) (d * E / devices);
            for (int d = 0; d < devices; d++) resident[l][d] = bounds[l][d + 1] - bounds[l][d];
        }
        return new ExpertOwners(devices, bounds, resident);
    }

    /**
     * The same ranges with other resident counts.
     *
     * @param resident [layer][device]: experts resident from the start of the device's range, 0 .. range size
     * @throws IllegalArgumentException when the shape or a count does not match the ranges
     */
    public ExpertOwners withResident(int[][] resident) {
        if (resident.length != bounds.length)
            throw new IllegalArgumentException("resident counts for " + resident.length + " layers, the map has " + bounds.length);
        int[][] r = new int[resident.length][];
        for (int l = 0; l < r.length; l++) {
            if (resident[l].length != devices)
                throw new IllegalArgumentException("layer " + l + ": resident counts for " + resident[l].length + " devices, the map has " + devices);
            r[l] = resident[l].clone();
            for (int d = 0; d < devices; d++)
                if (r[l][d] < 0 || r[l][d] > bounds[l][d + 1] - bounds[l][d])
                    throw new IllegalArgumentException("layer " + l + " device " + d + ": " + r[l][d] + " resident experts, its range holds "
                            + (bounds[l][d + 1] - bounds[l][d]));
        }
        return new ExpertOwners(devices, bounds, r);
    }

    /** The number of devices D. */
    public int devices() {
        return devices;
    }

    /** The number of layers. */
    public int layers() {
        return bounds.length;
    }

    /** Routed experts of a layer (E). */
    public int experts(int layer) {
        return bounds[layer][devices];
    }

    /** First expert of the device's range in the layer. */
    public int rangeStart(int layer, int device) {
        return bounds[layer][device];
    }

    /** One past the last expert of the device's range in the layer (= {@link #rangeStart} when the range is empty). */
    public int rangeEnd(int layer, int device) {
        return bounds[layer][device + 1];
    }

    /** Experts of the layer resident on the device: experts {@link #rangeStart} .. {@link #residentEnd}−1. */
    public int resident(int layer, int device) {
        return resident[layer][device];
    }

    /** One past the last expert of the layer resident on the device. */
    public int residentEnd(int layer, int device) {
        return bounds[layer][device] + resident[layer][device];
    }

    /** Per layer, the experts resident on the device (a new array). */
    public int[] residentPerLayer(int device) {
        int[] r = new int[bounds.length];
        for (int l = 0; l < r.length; l++) r[l] = resident[l][device];
        return r;
    }

    /**
     * The owner of an expert: the device 0 .. D−1 that holds it in its memory, or {@link #HOST}.
     * @throws IndexOutOfBoundsException for a layer or expert outside the map
     */
    public int owner(int layer, int expert) {
        int[] b = bounds[layer];
        if (expert < 0 || expert >= b[devices])
            throw new IndexOutOfBoundsException("expert " + expert + " of layer " + layer + ", which has " + b[devices]);
        // the last range whose start is at or before the expert (earlier ranges may be empty)
        int d = devices - 1;
        while (b[d] > expert) d--;
        return expert < b[d] + resident[layer][d] ? d : HOST;
    }

    /** Experts of a layer in host memory. */
    public int hostExperts(int layer) {
        int h = bounds[layer][devices];
        for (int r : resident[layer]) h -= r;
        return h;
    }

    /** Experts in host memory, all layers together. */
    public int hostExperts() {
        int h = 0;
        for (int l = 0; l < bounds.length; l++) h += hostExperts(l);
        return h;
    }

    /** Experts resident on the device, all layers together. */
    public int residentExperts(int device) {
        int n = 0;
        for (int[] r : resident) n += r[device];
        return n;
    }

    /** The device's resident experts per layer as "R" or "lo..hi" (the range over layers); "0" without layers. */
    public String residentRange(int device) {
        int lo = Integer.MAX_VALUE, hi = 0;
        for (int[] r : resident) {
            lo = Math.min(lo, r[device]);
            hi = Math.max(hi, r[device]);
        }
        if (resident.length == 0) return "0";
        return lo == hi ? Integer.toString(lo) : lo + ".." + hi;
    }

    /**
     * The device's range for messages, to follow "experts ": "a..b of each layer" (inclusive) when every layer has the
     * same one, "in ranges that differ by layer" when not, "none" when it is empty in every layer.
     */
    String rangeText(int device) {
        if (bounds.length == 0) return "none";
        int a = bounds[0][device], b = bounds[0][device + 1];
        for (int[] x : bounds) if (x[device] != a || x[device + 1] != b) return "in ranges that differ by layer";
        return a == b ? "none" : a + ".." + (b - 1) + " of each layer";
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ExpertOwners x && x.devices == devices && Arrays.deepEquals(x.bounds, bounds)
               && Arrays.deepEquals(x.resident, resident);
    }

    @Override
    public int hashCode() {
        return 31 * Arrays.deepHashCode(bounds) + Arrays.deepHashCode(resident);
    }

    @Override
    public String toString() {
        StringBuilder s = new StringBuilder("ExpertOwners[").append(devices).append(" devices");
        for (int d = 0; d < devices; d++)
            s.append("; device ").append(d).append(": experts ").append(rangeText(d)).append(", ").append(residentRange(d)).append(" resident per layer");
        return s.append("; ").append(hostExperts()).append(" in host memory]").toString();
    }
}
