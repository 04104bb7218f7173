package io.ds4j.engine;

import java.util.ArrayList;
import java.util.List;

/**
 * Start-up and reload checks of backend options that only some backends support (issue 8 item 3; the reference
 * system's feature gate): the F16-KV verifier is accepted only with {@code backend: hip} on a single device.
 */
public final class FeatureGate {
    private FeatureGate() {}

    /**
     * @param backend the configured backend name
     * @return one message per refused option, each naming the requirement and the current setting; empty = accepted
     */
    public static List<String> check(String backend, BackendOptions o) {
        List<String> refused = new ArrayList<>();
        if (o.f16KvVerify() && !("hip".equals(backend) && o.devices() == 1))
            refused.add("verify.f16Kv (--fused-verify-f16-kv) requires backend hip on a single device; current: backend "
                    + backend + (o.devices() == 1 ? "" : " on " + o.devices() + " devices"));
        return refused;
    }
}
