package io.ds4j.engine;

import io.ds4j.app.Backends;
import io.ds4j.engine.BackendOptions.ExpertPlacement;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The feature gate of the F16-KV verifier and the placement decision:
 * every combination of backend, device count, expert placement and option is accepted, refused with its message, or
 * diagnosed. All of it runs without a GPU: the gate and the placement resolution are pure functions.
 */
class FeatureGateTest {
    static final String F16_REFUSED = "verify.f16Kv: the F16-KV verifier (--fused-verify-f16-kv) requires backend hip on a single device; current: ";
    static final String DEVICES_REFUSED = "gpu.devices: backend hip runs on a single device (no multi-device split); current: ";

    static BackendOptions options(int devices, ExpertPlacement p, boolean f16) {
        return new BackendOptions(devices, p, 0, f16, 512);
    }

    /**
     * The matrix. Outcome: "accepted" (gate passes, verify path as listed, no diagnostic), "diagnosed" (gate passes,
     * the F16-KV verifier is requested but inactive with the hybrid warning), or the refusal messages (joined by |).
     */
    @ParameterizedTest(name = "{0} x {1} device(s) x {2} x f16Kv {3} -> {4}")
    @CsvSource(delimiter = ';', textBlock = """
            cpu; 1; monolithic; false; accepted
            cpu; 1; hybrid;     false; accepted
            cpu; 2; monolithic; false; accepted
            cpu; 2; hybrid;     false; accepted
            cpu; 1; monolithic; true;  F16:backend cpu on 1 device
            cpu; 1; hybrid;     true;  F16:backend cpu on 1 device
            cpu; 2; monolithic; true;  F16:backend cpu on 2 devices
            cpu; 2; hybrid;     true;  F16:backend cpu on 2 devices
            hip; 1; monolithic; false; accepted
            hip; 1; hybrid;     false; accepted
            hip; 1; monolithic; true;  accepted
            hip; 1; hybrid;     true;  diagnosed
            hip; 2; monolithic; false; DEV:backend hip on 2 devices
            hip; 2; hybrid;     false; DEV:backend hip on 2 devices
            hip; 2; monolithic; true;  F16:backend hip on 2 devices|DEV:backend hip on 2 devices
            hip; 2; hybrid;     true;  F16:backend hip on 2 devices|DEV:backend hip on 2 devices
            """)
    void gateMatrix(String backend, int devices, String placement, boolean f16, String outcome) {
        BackendOptions o = options(devices, ExpertPlacement.parse(placement), f16);
        List<String> refused = FeatureGate.check(backend, o);
        if (outcome.equals("accepted") || outcome.equals("diagnosed")) {
            assertEquals(List.of(), refused);
            if (backend.equals("cpu")) return; // the cpu backend has no placement to resolve: EngineStatus.cpu()
            ExpertPlacement effective = ExpertPlacement.parse(placement);
            int host = effective == ExpertPlacement.HYBRID ? 7 : 0;
            EngineStatus s = FeatureGate.resolve(backend, o, effective, host);
            assertEquals("hip", s.backend());
            assertEquals(placement, s.expertPlacement());
            assertEquals(host, s.hostExperts());
            assertEquals(f16, s.f16KvRequested());
            assertEquals(512, s.f32ShortContextRows());
            boolean active = outcome.equals("accepted") && f16;
            assertEquals(active, s.f16KvActive());
            assertEquals(active ? "f16" : "f32-convert", s.verifyAttention());
            if (outcome.equals("diagnosed")) {
                assertEquals("F16-KV verifier unavailable with hybrid expert placement; using F32 verifier attention "
                        + "(verify.f16Kv requested)", s.diagnostic());
            } else {
                assertNull(s.diagnostic());
            }
        } else {
            List<String> expected = java.util.Arrays.stream(outcome.split("\\|"))
                    .map(x -> (x.startsWith("F16:") ? F16_REFUSED : DEVICES_REFUSED) + x.substring(4)).toList();
            assertEquals(expected, refused);
            // whoever resolves a refused combination gets the same refusal, never a status
            if (backend.equals("hip")) {
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> FeatureGate.resolve(backend, o, ExpertPlacement.parse(placement), 0));
                assertEquals(String.join("; ", expected), e.getMessage());
            }
        }
    }

    @Test
    void theOptionMakesAutoAskForMonolithic() {
        assertEquals(ExpertPlacement.MONOLITHIC, FeatureGate.requestedPlacement(options(1, ExpertPlacement.AUTO, true)));
        assertEquals(ExpertPlacement.AUTO, FeatureGate.requestedPlacement(options(1, ExpertPlacement.AUTO, false)));
        // an explicit placement is what it says, with the option or without
        assertEquals(ExpertPlacement.HYBRID, FeatureGate.requestedPlacement(options(1, ExpertPlacement.HYBRID, true)));
        assertEquals(ExpertPlacement.MONOLITHIC, FeatureGate.requestedPlacement(options(1, ExpertPlacement.MONOLITHIC, false)));
        // the reason names the option whether it is on or off, so the start-up log says why the placement was chosen
        assertEquals("monolithic requested: gpu.expertPlacement auto, verify.f16Kv on",
                FeatureGate.placementReason(options(1, ExpertPlacement.AUTO, true)));
        assertEquals("auto requested: gpu.expertPlacement auto, verify.f16Kv off",
                FeatureGate.placementReason(options(1, ExpertPlacement.AUTO, false)));
    }

    @Test
    void autoWithTheOptionThatFellBackToHybridIsDiagnosed() {
        BackendOptions o = options(1, ExpertPlacement.AUTO, true);
        EngineStatus mono = FeatureGate.resolve("hip", o, ExpertPlacement.MONOLITHIC, 0);
        assertTrue(mono.f16KvActive());
        assertEquals("f16", mono.verifyAttention());
        assertNull(mono.diagnostic());
        EngineStatus hybrid = FeatureGate.resolve("hip", o, ExpertPlacement.HYBRID, 1200);
        assertTrue(hybrid.f16KvRequested());
        assertFalse(hybrid.f16KvActive());
        assertEquals("f32-convert", hybrid.verifyAttention());
        assertEquals(FeatureGate.F16KV_HYBRID_WARNING, hybrid.diagnostic());
        assertEquals(1200, hybrid.hostExperts());
        String line = FeatureGate.explain("hip", o, hybrid);
        assertTrue(line.contains("expert placement hybrid (monolithic requested: gpu.expertPlacement auto, verify.f16Kv on)"), line);
        assertTrue(line.contains("1200 routed experts in host memory"), line);
        assertTrue(line.contains("verify attention f32-convert (verify.f16Kv requested but off, see the warning)"), line);
        String active = FeatureGate.explain("hip", o, mono);
        assertTrue(active.contains("verify attention f16; attention in plain F32 up to 512 attended rows per query, on tensor cores"
                + " at F32 accuracy above (nvcc builds; hipcc builds stay in F32)"), active);
        assertTrue(line.contains("attention in plain F32 up to 512 attended rows per query"), line);
        assertFalse(active.contains("unavailable"), active);
    }

    @Test
    void resolveRefusesAnImpossiblePlacementReport() {
        BackendOptions auto = options(1, ExpertPlacement.AUTO, true);
        assertThrows(IllegalArgumentException.class, () -> FeatureGate.resolve("hip", auto, ExpertPlacement.AUTO, 0));
        assertThrows(IllegalArgumentException.class, () -> FeatureGate.resolve("hip", auto, null, 0));
        assertThrows(IllegalArgumentException.class, () -> FeatureGate.resolve("hip", auto, ExpertPlacement.MONOLITHIC, 3));
        assertThrows(IllegalArgumentException.class, () -> FeatureGate.resolve("hip", auto, ExpertPlacement.HYBRID, -1));
        // configured monolithic must fail at start-up when it does not fit, never end up hybrid
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> FeatureGate.resolve("hip", options(1, ExpertPlacement.MONOLITHIC, true), ExpertPlacement.HYBRID, 10));
        assertTrue(e.getMessage().contains("monolithic was configured"), e.getMessage());
    }

    @Test
    void cpuStatusAndItsExplanation() {
        EngineStatus s = EngineStatus.cpu();
        assertFalse(s.f16KvRequested());
        assertFalse(s.f16KvActive());
        assertNull(s.diagnostic());
        String line = FeatureGate.explain("cpu", BackendOptions.DEFAULTS, s);
        assertTrue(line.startsWith("backend cpu: routed experts in host memory, verify attention f32"), line);
    }

    @Test
    void backendsOpenAppliesTheGateBeforeLoadingAnything() {
        // the folder does not exist: a refusal must come first, naming the option, not a checkpoint error
        Path nowhere = Path.of("no-such-model-folder");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> Backends.open("cpu", nowhere, options(1, ExpertPlacement.AUTO, true)));
        assertEquals(F16_REFUSED + "backend cpu on 1 device", e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> Backends.open("cuda", nowhere, options(1, ExpertPlacement.AUTO, true)));
        assertTrue(e.getMessage().startsWith("unknown backend 'cuda'"), e.getMessage());
    }

    @Test
    void optionValuesAreRangeChecked() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> new BackendOptions(1, ExpertPlacement.AUTO, 0, true, 0));
        assertEquals("verify.f32ShortContextRows: must be an integer in [1, 4096], got 0", e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new BackendOptions(1, ExpertPlacement.AUTO, 0, true, 4097));
        assertEquals(4096, new BackendOptions(1, ExpertPlacement.AUTO, 0, true, 4096).f32ShortContextRows());
        assertEquals(1, new BackendOptions(1, ExpertPlacement.AUTO, 0, true, 1).f32ShortContextRows());
        assertThrows(IllegalArgumentException.class, () -> new BackendOptions(0, ExpertPlacement.AUTO, 0, false, 512));
        assertThrows(IllegalArgumentException.class, () -> new BackendOptions(1, ExpertPlacement.AUTO, -1, false, 512));
        assertEquals(ExpertPlacement.HYBRID, ExpertPlacement.parse(" Hybrid "));
        e = assertThrows(IllegalArgumentException.class, () -> ExpertPlacement.parse("sideways"));
        assertEquals("must be one of auto, monolithic, hybrid, got \"sideways\"", e.getMessage());
    }
}
