package io.ds4j.docs;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The repository explains itself: every "spec N.M" the sources, the README and its reference parts in docs cite is a section of
 * docs/ds4-architecture.md, and no comment points at tracker history instead of giving the reason.
 */
class SelfContainedRepositoryTest {
    static final Pattern CITE = Pattern.compile("spec (\\d+(?:\\.\\d+)?)\\b");
    static final Pattern HEADING = Pattern.compile("^#{2,3} (\\d+(?:\\.\\d+)?)[. ]", Pattern.MULTILINE);
    // built from parts so this file does not match itself
    static final Pattern TRACKER = Pattern.compile("\\b(?:" + "issue" + " \\d|" + "review" + " finding)");

    static List<Path> sources() throws IOException {
        List<Path> out = new ArrayList<>();
        for (String root : new String[]{"src", "tools"}) {
            try (Stream<Path> s = Files.walk(Path.of(root))) {
                s.filter(Files::isRegularFile).filter(p -> p.toString().matches(".*\\.(java|cpp|h|cu|py|sh|md|mjs|js)$"))
                        .filter(p -> !p.toString().contains("node_modules")).forEach(out::add);
            }
        }
        out.add(Path.of("README.md"));
        // the README's reference parts
        for (String d : new String[]{"docs/api.md", "docs/gpu.md", "docs/commands.md"}) out.add(Path.of(d));
        return out;
    }

    @Test
    void everyCitedSpecSectionExists() throws IOException {
        String doc = Files.readString(Path.of("docs/ds4-architecture.md"));
        Set<String> sections = new TreeSet<>();
        Matcher h = HEADING.matcher(doc);
        while (h.find()) sections.add(h.group(1));
        assertTrue(sections.containsAll(List.of("1.2", "3.4", "4.5", "6.6")), sections.toString());
        List<String> missing = new ArrayList<>();
        int cited = 0;
        for (Path p : sources()) {
            Matcher m = CITE.matcher(Files.readString(p));
            while (m.find()) {
                cited++;
                if (!sections.contains(m.group(1))) missing.add(p + ": spec " + m.group(1));
            }
        }
        assertTrue(cited > 50, "citations found: " + cited);
        assertEquals(List.of(), missing);
    }

    @Test
    void commentsGiveReasonsNotTrackerReferences() throws IOException {
        List<String> found = new ArrayList<>();
        for (Path p : sources()) {
            if (p.toString().endsWith(".md")) continue;
            List<String> lines = Files.readAllLines(p);
            for (int i = 0; i < lines.size(); i++)
                if (TRACKER.matcher(lines.get(i)).find()) found.add(p + ":" + (i + 1) + ": " + lines.get(i).strip());
        }
        assertEquals(List.of(), found);
    }
}
