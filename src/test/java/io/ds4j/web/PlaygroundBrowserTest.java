package io.ds4j.web;

import io.ds4j.engine.Backend;
import io.ds4j.engine.Sequence;
import io.ds4j.model.ModelConfig;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.server.Ds4jServer;
import io.ds4j.server.LoadedModel;
import io.ds4j.server.ModelProvider;
import io.ds4j.server.config.ServerConfig;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.openqa.selenium.By;
import org.openqa.selenium.Dimension;
import org.openqa.selenium.JavascriptExecutor;
import org.openqa.selenium.Keys;
import org.openqa.selenium.OutputType;
import org.openqa.selenium.TakesScreenshot;
import org.openqa.selenium.WebDriver;
import org.openqa.selenium.WebElement;
import org.openqa.selenium.chrome.ChromeDriver;
import org.openqa.selenium.chrome.ChromeDriverService;
import org.openqa.selenium.chrome.ChromeOptions;
import org.openqa.selenium.support.ui.WebDriverWait;

import java.io.File;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The playground ({@code webroot/}) end to end in real headless Chromium (Debian's {@code chromium} and
 * {@code chromium-driver}, driven by Selenium) against a real server on loopback running the embedded tiny model.
 *
 * <p>It sends a message with Enter and watches the answer grow while it streams, checks the per-answer figures from
 * the usage chunk, turns thinking on and sees the reasoning block, stops a long answer and checks on /metrics that the
 * server stopped generating, edits and resends the last message, shows HTTP and mid-stream errors, checks that model
 * output cannot inject script, lays the page out at phone width, and sends the predicted output from the settings, every turn of the history (one without text as an empty answer) and stop strings with newlines. Screenshots go to the build folder
 * ({@code playground.png}, {@code playground-phone.png}).
 *
 * <p>Skipped, with a message, when Chromium is not installed — except under {@code CI=true}, where it fails instead.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class PlaygroundBrowserTest {
    static final Path CHROMIUM = Path.of("/usr/bin/chromium");
    static final Path CHROMEDRIVER = Path.of("/usr/bin/chromedriver");
    static final Duration WAIT = Duration.ofSeconds(60);

    static Ds4jServer server;
    static FaultyBackend backend;
    static WebDriver driver;
    static String base;
    static String modelId;
    static Path buildDir;
    static final HttpClient HTTP = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();

    @BeforeAll
    static void start() throws Exception {
        boolean installed = Files.isExecutable(CHROMIUM) && Files.isExecutable(CHROMEDRIVER);
        if (!installed) {
            String what = "the playground browser test needs Debian's chromium and chromium-driver (" + CHROMIUM + ", "
                    + CHROMEDRIVER + "); install them with: apt-get install -y chromium chromium-driver";
            if ("true".equalsIgnoreCase(System.getenv("CI"))) fail("CI=true but " + what);
            Assumptions.abort("SKIPPED: " + what);
        }
        buildDir = Path.of(PlaygroundBrowserTest.class.getProtectionDomain().getCodeSource().getLocation().toURI()).getParent();
        Path webroot = Path.of("webroot").toAbsolutePath();
        assertTrue(Files.isRegularFile(webroot.resolve("index.html")), "webroot/index.html exists in " + webroot);

        Map<String, Object> o = new LinkedHashMap<>();
        o.put("server.host", "127.0.0.1");
        o.put("server.port", 0);
        o.put("server.httpInstances", 1);
        o.put("server.webroot", webroot.toString());
        ModelProvider embeddedWithFaults = (cfg, log) -> {
            LoadedModel m = new DefaultModelProvider().load(cfg, log);
            backend = new FaultyBackend(m.backend());
            return new LoadedModel(m.id(), m.path(), m.embedded(), backend, m.tokenizer(), m.draft());
        };
        ServerConfig cfg = ServerConfig.parse(null, "playground-test", o);
        server = Ds4jServer.start(new Ds4jServer.Options(cfg, null, o, embeddedWithFaults)).await();
        server.ready().await();
        base = "http://127.0.0.1:" + server.port();
        modelId = server.state().model().id();

        ChromeOptions opts = new ChromeOptions();
        opts.setBinary(CHROMIUM.toFile());
        opts.addArguments("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                "--user-data-dir=" + Files.createTempDirectory("ds4j-chrome-profile"),
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                "--window-size=1280,1200", "--lang=en-US", "--force-color-profile=srgb", "--hide-scrollbars");
        ChromeDriverService service = new ChromeDriverService.Builder()
                .usingDriverExecutable(new File(CHROMEDRIVER.toString())).usingAnyFreePort().build();
        driver = new ChromeDriver(service, opts);
        driver.manage().timeouts().scriptTimeout(Duration.ofSeconds(30));
    }

    @AfterAll
    static void stop() {
        if (driver != null) driver.quit();
        if (server != null) server.close().await();
    }

    /** Every test starts from an empty conversation with default settings, at desktop size. */
    @BeforeEach
    void freshPage() {
        driver.manage().window().setSize(new Dimension(1280, 1200));
        driver.get(base + "/");
        js("localStorage.clear()");
        driver.navigate().refresh();
        waitFor("the model name from /props", () -> modelId.equals(text("#model-name"))
                && "ready".equals(attr("#status-dot", "data-status")));
    }

    // --------------------------------------------------------------------------------------------- the tests

    @Test
    @Order(1)
    void streamsAnAnswerThenThinks() throws Exception {
        assertEquals("ds4j playground", driver.getTitle());
        openSettings();
        setField("#max-tokens", "100");
        setField("#seed", "7");
        assertEquals("512 (server: 4096)", attr("#max-tokens", "placeholder"), "page default max_tokens, and the server's from /props");
        recordAnswerLengths();

        // Shift+Enter makes a new line, Enter sends
        WebElement prompt = find("#prompt");
        prompt.sendKeys("Hello! What can you do?");
        prompt.sendKeys(Keys.chord(Keys.SHIFT, Keys.ENTER));
        prompt.sendKeys("Answer in Markdown, please.");
        prompt.sendKeys(Keys.ENTER);

        // watch the answer while it streams
        Set<Integer> seen = new LinkedHashSet<>();
        long end = System.currentTimeMillis() + WAIT.toMillis();
        while (System.currentTimeMillis() < end) {
            String st = lastAssistantState();
            if (st != null && !st.equals("streaming")) break;
            int n = lastAnswerLength();
            if (st != null && n > 0) seen.add(n);
            Thread.sleep(15);
        }
        assertEquals("done", lastAssistantState(), "the answer finished: " + errorText());
        Set<Integer> observed = new LinkedHashSet<>(seen);
        observed.addAll(streamedLengthsFromPage());
        assertTrue(observed.size() >= 2, "saw the streamed answer grow through at least two non-empty lengths, saw " + observed);
        int finalLength = lastAnswerLength();
        assertTrue(finalLength > 0, "a non-empty answer");
        assertTrue(observed.stream().allMatch(n -> n <= finalLength), "the text only grew: " + observed + " then " + finalLength);

        assertEquals("Hello! What can you do?\nAnswer in Markdown, please.", text(".msg.user .bubble"),
                "Shift+Enter put a new line into the message");
        assertTrue(driver.findElements(By.cssSelector(".msg.assistant details.reasoning")).isEmpty(), "no reasoning without thinking");

        // the figures of the usage chunk, and the tokens/s chart
        WebElement stats = find(".msg.assistant .stats");
        assertEquals("true", stats.getDomAttribute("data-final"));
        String s = stats.getText();
        for (String want : List.of("TTFT", "prefill", "decode", "tok/s", "tokens", "accept", "tok/step"))
            assertTrue(s.contains(want), "stats show '" + want + "': " + s);
        assertTrue(s.matches("(?s).*tokens \\d+ → 100.*"), "100 tokens generated (max tokens 100): " + s);
        assertFalse(driver.findElements(By.cssSelector(".msg.assistant .stats canvas")).isEmpty(), "a tokens/s chart");
        assertTrue(text(".msg.assistant .notice").contains("token limit"), "finish_reason length is explained");

        // thinking on, effort max: the reasoning block appears, apart from the answer
        assertFalse(find("#effort").isEnabled(), "effort is only for thinking");
        find("label[for=thinking]").click();
        assertTrue(find("#thinking").isSelected());
        assertTrue(find("#effort").isEnabled());
        selectOption("#effort", "max");
        setField("#max-tokens", "48");
        prompt.sendKeys("And now think about it first.");
        prompt.sendKeys(Keys.ENTER);
        waitFor("a reasoning block", () -> !driver.findElements(By.cssSelector(".msg.assistant:last-of-type details.reasoning")).isEmpty());
        waitFor("the thinking answer to finish", () -> "done".equals(lastAssistantState()));
        String reasoning = (String) js("return document.querySelector('.msg.assistant:last-of-type .reasoning-body').textContent");
        assertFalse(reasoning.isBlank(), "reasoning text streamed into the reasoning block");
        assertTrue(text(".msg.assistant:last-of-type .who").contains("thinking · max"));
        assertEquals(2, driver.findElements(By.cssSelector(".msg.assistant")).size());
        assertEquals(4, driver.findElements(By.cssSelector(".msg")).size());
        screenshot("playground.png");
    }

    @Test
    @Order(2)
    void stopEndsTheGenerationOnTheServerThenEditAndResend() throws Exception {
        openSettings();
        find("#ignore-eos").click(); // an end-of-sequence token must not end it before we stop it
        double cancelled0 = metric("ds4j:requests_cancelled_total");
        WebElement prompt = find("#prompt");
        prompt.sendKeys("Please count for a long time.");
        find("#send").click();
        waitFor("streaming text", () -> lastAnswerLength() > 0);
        waitFor("the server to run it", () -> metric("vllm:num_requests_running") == 1.0);
        assertTrue(find("#stop").isDisplayed(), "Stop is offered while generating");
        assertFalse(find("#send").isDisplayed());
        double gen0 = metric("vllm:generation_tokens_total");
        find("#stop").click();
        waitFor("the page to show it stopped", () -> "stopped".equals(lastAssistantState()));
        assertTrue(text(".msg.assistant .notice").startsWith("Stopped"));
        waitFor("no request running on the server", () -> metric("vllm:num_requests_running") == 0.0);
        assertEquals(cancelled0 + 1, metric("ds4j:requests_cancelled_total"), "the server counted a cancellation");
        double gen1 = metric("vllm:generation_tokens_total");
        Thread.sleep(800);
        double gen2 = metric("vllm:generation_tokens_total");
        assertEquals(gen1, gen2, "no tokens generated after the stop");
        assertTrue(gen1 - gen0 < 1000, "it stopped long before max tokens (" + (gen1 - gen0) + " more after the click)");
        assertTrue(find("#send").isDisplayed(), "Send is back");

        // edit the last user message and send it again: the stopped answer is replaced
        setField("#max-tokens", "24");
        find(".msg.user .edit-btn").click();
        WebElement edit = find(".edit-box textarea");
        edit.clear();
        edit.sendKeys("Count to three instead.");
        edit.sendKeys(Keys.ENTER);
        waitFor("the new answer", () -> "done".equals(lastAssistantState()));
        assertEquals("Count to three instead.", text(".msg.user .bubble"));
        assertEquals(1, driver.findElements(By.cssSelector(".msg.user")).size());
        assertEquals(1, driver.findElements(By.cssSelector(".msg.assistant")).size(), "the stopped answer was replaced");
        assertTrue(text(".msg.assistant .stats").contains("→ 24"), "24 tokens: " + text(".msg.assistant .stats"));

        // regenerate gives a new answer in its place
        find(".msg.assistant .actions button:last-child").click();
        waitFor("the regenerated answer", () -> "done".equals(lastAssistantState()));
        assertEquals(1, driver.findElements(By.cssSelector(".msg.assistant")).size());
    }

    @Test
    @Order(3)
    void showsServerErrorsPlainly() throws Exception {
        openSettings();
        setField("#temperature", "5");
        find("#prompt").sendKeys("Hi", Keys.ENTER);
        waitFor("an error", () -> "error".equals(lastAssistantState()));
        String err = errorText();
        assertTrue(err.contains("HTTP 400"), err);
        assertTrue(err.contains("temperature"), "the server's message names the field: " + err);

        // an engine failure after the stream started arrives as data: {"error": ...}
        setField("#temperature", "");
        setField("#max-tokens", "400");
        find("#prompt").sendKeys("Hi again", Keys.ENTER);
        waitFor("streaming text", () -> lastAnswerLength() > 0 && "streaming".equals(lastAssistantState()));
        backend.failNext = true;
        waitFor("the mid-stream error", () -> "error".equals(lastAssistantState()));
        err = errorText();
        assertTrue(err.contains("Error during generation"), err);
        assertTrue(err.contains("injected backend fault"), "the server's message: " + err);
        assertTrue(lastAnswerLength() > 0, "the text before the error stays");

        // model output is Markdown, sanitised: nothing in it can run script
        String html = (String) js("""
                window.__xss = 0;
                const d = document.createElement('div');
                document.body.append(d);
                ds4jPlayground.renderMarkdown(d, '<img src=x onerror="window.__xss=1"> <script>window.__xss=2<\\/script>'
                  + ' [link](javascript:window.__xss=3) <iframe src="javascript:window.__xss=4"></iframe> **bold** `code`'
                  + ' ![tracker](http://127.0.0.1:9/pixel.png)\\n\\n'
                  + '```js\\nconst a = 1;\\n```');
                const h = d.innerHTML; d.remove(); return h;""");
        Thread.sleep(200);
        assertEquals(0L, ((Number) js("return window.__xss")).longValue(), "no injected script ran: " + html);
        assertFalse(html.contains("onerror") || html.contains("<script") || html.contains("javascript:") || html.contains("<iframe")
                || html.contains("<img"), "sanitised, and no image the model names is fetched: " + html);
        assertTrue(html.contains("<strong>bold</strong>") && html.contains("<code>code</code>") && html.contains("hljs"), html);
    }

    @Test
    @Order(4)
    void fitsAPhone() throws Exception {
        driver.manage().window().setSize(new Dimension(390, 844));
        driver.navigate().refresh();
        waitFor("the model name", () -> modelId.equals(text("#model-name")));
        find("#prompt").sendKeys("Hello from a phone", Keys.ENTER);
        waitFor("the answer", () -> lastAnswerLength() > 150 || !"streaming".equals(lastAssistantState()));
        if ("streaming".equals(lastAssistantState())) find("#stop").click();
        waitFor("the end of the answer", () -> !"streaming".equals(lastAssistantState()));
        long overflow = ((Number) js("return document.documentElement.scrollWidth - document.documentElement.clientWidth")).longValue();
        assertTrue(overflow <= 0, "no sideways scrolling at phone width (" + overflow + " px too wide)");
        assertTrue(find("#prompt").isDisplayed() && find("#send").isDisplayed(), "composer on screen");
        openSettings();
        long panel = ((Number) js("return document.getElementById('settings').getBoundingClientRect().width")).longValue();
        assertTrue(panel <= 390, "the settings panel fits the screen: " + panel);
        find("#settings-close").click();
        screenshot("playground-phone.png");
    }

    @Test
    @Order(5)
    void sendsThePredictedOutputFromSettings() {
        openSettings();
        setField("#temperature", "0");
        setField("#max-tokens", "24");
        find("#prompt").sendKeys("Predict me", Keys.ENTER);
        waitFor("the first answer", () -> "done".equals(lastAssistantState()));
        String first = (String) js("const m = window.ds4jPlayground.state.messages; return m[m.length - 1].content;");
        assertFalse(first.isEmpty(), "an answer: " + errorText());
        assertFalse(text(".msg.assistant .stats").contains("predicted"), "no prediction figures without a prediction");

        // the same question in a new conversation, with the first answer as the predicted output
        js("const p = document.getElementById('prediction'); p.value = arguments[0]; p.dispatchEvent(new Event('change'));", first);
        find("#new-chat").click();
        find("#prompt").sendKeys("Predict me", Keys.ENTER);
        waitFor("the predicted answer", () -> "done".equals(lastAssistantState()));
        assertEquals(first, js("const m = window.ds4jPlayground.state.messages; return m[m.length - 1].content;"),
                "a prediction does not change the greedy answer");
        String stats = text(".msg.assistant .stats");
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("predicted\\s*(\\d+) / (\\d+)").matcher(stats);
        assertTrue(m.find(), "the answer shows the prediction's accepted / rejected tokens: " + stats);
        assertTrue(Integer.parseInt(m.group(1)) > 0, "the answer sent back as the prediction is accepted: " + stats);
        driver.navigate().refresh();
        openSettings();
        assertEquals(first, find("#prediction").getDomProperty("value"), "the predicted output is kept with the settings");
    }

    /**
     * An assistant turn with no text (here one that ended in an error) is sent back in the history as content "", so
     * the next request has no two user messages in a row, and the server accepts it; a stop string typed with \\n is
     * sent with a newline in it.
     */
    @Test
    @Order(6)
    void sendsEveryTurnBackAndStopStringsWithNewlines() {
        // the request bodies the page sends, as sent
        js("""
                window.__bodies = [];
                const f = window.fetch;
                window.fetch = (url, o) => {
                  if (String(url).includes('/v1/chat/completions')) window.__bodies.push(JSON.parse(o.body));
                  return f(url, o);
                };""");
        openSettings();
        setField("#temperature", "5");
        find("#prompt").sendKeys("First", Keys.ENTER);
        waitFor("the refused answer", () -> "error".equals(lastAssistantState()));
        setField("#temperature", "0");
        setField("#max-tokens", "4");
        setField("#stop-strings", "###\\n\\n");
        find("#prompt").sendKeys("Second", Keys.ENTER);
        waitFor("the second answer", () -> "done".equals(lastAssistantState()));
        @SuppressWarnings("unchecked")
        List<Map<String, Object>> messages = (List<Map<String, Object>>) js("const b = window.__bodies; return b[b.length - 1].messages;");
        assertEquals(List.of("user", "assistant", "user"), messages.stream().map(x -> x.get("role")).toList(), messages.toString());
        assertEquals("", messages.get(1).get("content"), "the turn without text is sent as an empty answer");
        assertEquals(List.of("###\n\n"), js("const b = window.__bodies; return b[b.length - 1].stop;"));
        assertEquals(List.of("a\\nb", "\\x", "\t"), js("return window.ds4jPlayground.stopStrings(arguments[0]);",
                "a\\\\nb\n\n\\x\n\\t"));
    }

    // --------------------------------------------------------------------------------------------- helpers

    static Object js(String script, Object... args) {
        return ((JavascriptExecutor) driver).executeScript(script, args);
    }

    static WebElement find(String css) {
        return driver.findElement(By.cssSelector(css));
    }

    static String text(String css) {
        List<WebElement> e = driver.findElements(By.cssSelector(css));
        return e.isEmpty() ? null : e.getFirst().getText();
    }

    static String attr(String css, String name) {
        List<WebElement> e = driver.findElements(By.cssSelector(css));
        return e.isEmpty() ? null : e.getFirst().getDomAttribute(name);
    }

    static void openSettings() {
        if (!"true".equals(attr("#settings-toggle", "aria-expanded"))) find("#settings-toggle").click();
        waitFor("the settings panel", () -> find("#settings").isDisplayed());
    }

    static void setField(String css, String value) {
        WebElement e = find(css);
        e.clear();
        if (!value.isEmpty()) e.sendKeys(value);
    }

    static void selectOption(String css, String value) {
        js("const s = document.querySelector(arguments[0]); s.value = arguments[1]; s.dispatchEvent(new Event('change'));", css, value);
    }

    static String lastAssistantState() {
        return (String) js("const a = document.querySelectorAll('.msg.assistant'); return a.length ? a[a.length - 1].dataset.state : null;");
    }

    /** Characters of the last answer's text (0 while it shows the waiting placeholder). */
    static int lastAnswerLength() {
        Object n = js("""
                const a = document.querySelectorAll('.msg.assistant .answer');
                if (!a.length) return 0;
                const e = a[a.length - 1];
                return e.querySelector('.waiting') ? 0 : e.textContent.length;""");
        return ((Number) n).intValue();
    }

    static String errorText() {
        Object t = js("const e = document.querySelectorAll('.msg.assistant .error-box'); return e.length ? e[e.length - 1].textContent : '';");
        return String.valueOf(t);
    }

    /** Records, in the page, the answer's length at every DOM change while it streams. */
    static void recordAnswerLengths() {
        js("""
                window.__lengths = [];
                new MutationObserver(() => {
                  const a = document.querySelectorAll('.msg.assistant');
                  if (!a.length) return;
                  const m = a[a.length - 1], ans = m.querySelector('.answer');
                  if (m.dataset.state === 'streaming' && ans && !ans.querySelector('.waiting') && ans.textContent.length)
                    window.__lengths.push(ans.textContent.length);
                }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true, attributes: true});""");
    }

    static List<Integer> streamedLengthsFromPage() {
        List<Integer> out = new ArrayList<>();
        Object o = js("return window.__lengths || []");
        if (o instanceof List<?> l) for (Object x : l) out.add(((Number) x).intValue());
        return out;
    }

    static void waitFor(String what, BooleanSupplier c) {
        new WebDriverWait(driver, WAIT, Duration.ofMillis(25)).withMessage("waiting for " + what).until(d -> c.getAsBoolean());
    }

    static double metric(String name) {
        try {
            HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(base + "/metrics")).build(),
                    HttpResponse.BodyHandlers.ofString());
            double v = io.ds4j.server.PromText.value(r.body(), name);
            if (Double.isNaN(v)) throw new AssertionError("no metric " + name);
            return v;
        } catch (java.io.IOException | InterruptedException e) {
            throw new RuntimeException(e);
        }
    }

    static void screenshot(String name) throws Exception {
        Path f = ((TakesScreenshot) driver).getScreenshotAs(OutputType.FILE).toPath();
        Path to = buildDir.resolve(name);
        Files.copy(f, to, StandardCopyOption.REPLACE_EXISTING);
        System.out.println("playground screenshot: " + to);
    }

    /** The embedded model's backend; {@link #failNext} makes its next forward throw, as a failing engine would. */
    static final class FaultyBackend implements Backend {
        final Backend inner;
        volatile boolean failNext;

        FaultyBackend(Backend inner) {
            this.inner = inner;
        }

        @Override
        public String name() {
            return inner.name();
        }

        @Override
        public ModelConfig config() {
            return inner.config();
        }

        @Override
        public Sequence newSequence(int maxRollback) {
            return inner.newSequence(maxRollback);
        }

        @Override
        public float[] forward(Sequence seq, int[] tokens, int off, int count, int[] logitRows) {
            if (failNext) {
                failNext = false;
                throw new IllegalStateException("injected backend fault (playground test)");
            }
            return inner.forward(seq, tokens, off, count, logitRows);
        }

        @Override
        public long stateBytes(int contextTokens, int maxRollback) {
            return inner.stateBytes(contextTokens, maxRollback);
        }

        @Override
        public void close() {
            inner.close();
        }
    }
}
