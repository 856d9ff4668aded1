/* test_classify.c — pol_classify on a labelled set of prompts (code snippets in
 * several languages, data payloads and requests for a format, everyday chat):
 * asserts at least 90% accuracy and prints it with the time per call. */
#include "policy/classify.h"
#include "tests/testutil.h"

#include <string.h>
#include <time.h>

typedef struct {
    const char *label;
    const char *text;
} sample;

static const sample set[] = {
    /* ---- code: snippets ---- */
    {"code", "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"},
    {"code", "#include <stdio.h>\n\nint main(void) {\n    printf(\"hello\\n\");\n    return 0;\n}\n"},
    {"code", "function debounce(fn, ms) {\n  let t;\n  return (...args) => {\n    clearTimeout(t);\n    t = setTimeout(() => fn(...args), ms);\n  };\n}\n"},
    {"code", "fn main() {\n    let v: Vec<u32> = (1..10).collect();\n    println!(\"{:?}\", v);\n}\n"},
    {"code", "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n"},
    {"code", "public class Hello {\n    public static void main(String[] args) {\n        System.out.println(\"Hello\");\n    }\n}\n"},
    {"code", "SELECT name, COUNT(*) FROM orders WHERE created_at > '2024-01-01' GROUP BY name ORDER BY 2 DESC;"},
    {"code", "#!/bin/bash\nfor f in *.txt; do\n  echo \"$f\"\n  wc -l \"$f\"\ndone\n"},
    {"code", "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        self.items.append(x)\n"},
    {"code", "Why does this segfault?\n\nchar *s = NULL;\nstrcpy(s, \"abc\");\n"},
    {"code", "template <typename T>\nT max_of(const std::vector<T>& v) {\n    return *std::max_element(v.begin(), v.end());\n}\n"},
    {"code", "const express = require('express');\nconst app = express();\napp.get('/', (req, res) => res.send('ok'));\napp.listen(3000);\n"},
    {"code", "Fix the bug in this code:\n\nfor (int i = 0; i <= n; i++) {\n    sum += a[i];\n}\n"},
    {"code", "```python\nimport numpy as np\nx = np.linspace(0, 1, 10)\nprint(x.mean())\n```\nWhat does this print?"},
    {"code", "local function greet(name)\n  return \"Hello, \" .. name\nend\nprint(greet(\"world\"))\n"},
    {"code", "impl Display for Point {\n    fn fmt(&self, f: &mut Formatter) -> fmt::Result {\n        write!(f, \"({}, {})\", self.x, self.y)\n    }\n}\n"},
    /* ---- code: requests ---- */
    {"code", "Write a Python function that checks whether a number is prime."},
    {"code", "Implement a binary search in Rust and explain its complexity."},
    {"code", "Write a bash script that backs up my home directory every night."},
    {"code", "Can you refactor this JavaScript function to use async/await instead of callbacks?"},
    {"code", "Write a SQL query that returns the top 5 customers by total spend."},
    {"code", "Give me a regex that matches IPv4 addresses."},
    {"code", "Write a C++ class for a thread-safe queue."},
    {"code", "How do I reverse a linked list in Java? Show the code."},
    /* ---- structured: payloads ---- */
    {"structured", "{\"name\": \"Ada\", \"age\": 36, \"languages\": [\"en\", \"fr\"], \"active\": true}"},
    {"structured", "[{\"id\": 1, \"title\": \"a\"}, {\"id\": 2, \"title\": \"b\"}]"},
    {"structured", "server:\n  host: 0.0.0.0\n  port: 8080\nlogging:\n  level: debug\n  file: /var/log/app.log\n"},
    {"structured", "name,age,city\nAlice,30,Paris\nBob,25,Berlin\nCarol,41,Rome\n"},
    {"structured", "<note>\n  <to>Tove</to>\n  <from>Jani</from>\n  <body>Don't forget me this weekend!</body>\n</note>\n"},
    {"structured", "| item | qty | price |\n|------|-----|-------|\n| pen  | 2   | 1.50  |\n| book | 1   | 12.00 |\n"},
    {"structured", "Parse this into fields:\n{\"order_id\": \"A17\", \"items\": [{\"sku\": \"X1\", \"qty\": 2}], \"total\": 19.99}"},
    {"structured", "id\tname\tscore\n1\tanna\t88\n2\tben\t92\n"},
    {"structured", "- name: build\n  run: make\n- name: test\n  run: make test\n"},
    {"structured", "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"},
    /* ---- structured: requests for a format ---- */
    {"structured", "Return JSON with fields name, email and signup_date for three fictional users."},
    {"structured", "Extract the dates and amounts from this invoice and output them as CSV."},
    {"structured", "Convert the following list of cities into a YAML mapping of country to cities: Paris, Lyon, Berlin, Munich."},
    {"structured", "Give me a JSON schema for a blog post with title, body, tags and author."},
    {"structured", "Respond only with a JSON object containing keys \"sentiment\" and \"confidence\"."},
    {"structured", "Make a table with columns country, capital and population for five European countries."},
    {"structured", "Turn this into XML: the book 'Dune' by Frank Herbert, published 1965."},
    {"structured", "List the planets of the solar system as a JSON array of objects with name and moons fields."},
    {"structured", "Output a CSV with columns date, open, close for the last three trading days."},
    {"structured", "Format the meeting notes below as YAML with keys attendees, decisions and action_items."},
    /* ---- chat ---- */
    {"chat", "What is the capital of Australia?"},
    {"chat", "Explain the difference between weather and climate in simple terms."},
    {"chat", "Tell me a short story about a lighthouse keeper who befriends a seal."},
    {"chat", "I have a job interview tomorrow. Any tips for staying calm?"},
    {"chat", "Why is the sky blue?"},
    {"chat", "Can you summarize the plot of Pride and Prejudice in a few sentences?"},
    {"chat", "What are some good vegetarian dinner ideas for a family of four?"},
    {"chat", "Translate 'good morning, how are you?' into Spanish."},
    {"chat", "Write a haiku about autumn leaves."},
    {"chat", "How long should I boil an egg for a soft yolk?"},
    {"chat", "Who won the football World Cup in 2014, and who was the top scorer?"},
    {"chat", "Give me three arguments for and against remote work."},
    {"chat", "My cat keeps scratching the sofa. What can I do about it? I've tried sprays already."},
    {"chat", "Describe the water cycle for a ten-year-old."},
    {"chat", "What's a good name for a bakery that specialises in sourdough?"},
    {"chat", "Hi! How are you today?"},
    {"chat", "Compose a polite email declining a wedding invitation."},
    {"chat", "What happened during the French Revolution? Keep it brief."},
    {"chat", "Is it better to rent or buy a house in a city with high prices? Walk me through the trade-offs."},
    {"chat", "Recommend some books similar to The Hobbit for a teenager."},
    {"chat", "How do vaccines train the immune system?"},
    {"chat", "Plan a three-day itinerary for a first visit to Kyoto."},
    /* ---- written after the scorer was tuned (a check against overfitting) ---- */
    {"code", "Here's my Kotlin data class, why won't it compile?\n\ndata class User(val name: String, val age: Int)\nfun main() { val u = User(\"a\") }"},
    {"code", "x = [i * i for i in range(10) if i % 2 == 0]\nprint(sum(x))"},
    {"code", "Write a Go HTTP handler that returns the current time."},
    {"code", "useEffect(() => {\n  fetch(url).then(r => r.json()).then(setData);\n}, [url]);"},
    {"structured", "Please produce a YAML config for a Kubernetes deployment with 3 replicas of nginx."},
    {"structured", "{\n  \"user\": {\n    \"id\": 42,\n    \"roles\": [\"admin\", \"dev\"]\n  }\n}"},
    {"structured", "date,temperature\n2024-01-01,3.2\n2024-01-02,4.1\n2024-01-03,2.7"},
    {"structured", "Classify each review as positive or negative and return the result as JSON lines with id and label."},
    {"chat", "What is the best way to learn to play the guitar as an adult?"},
    {"chat", "Summarize the main causes of the First World War."},
    {"chat", "Can you help me write a birthday message for my grandmother?"},
    {"chat", "What does a product manager do all day?"},
};

int main(void) {
    int n = (int)(sizeof(set) / sizeof(set[0]));
    int right = 0, per[3] = {0}, per_right[3] = {0};
    const char *labels[3] = {"code", "structured", "chat"};
    for (int i = 0; i < n; i++) {
        const char *got = pol_classify(set[i].text, strlen(set[i].text));
        int li = !strcmp(set[i].label, "code") ? 0 : !strcmp(set[i].label, "structured") ? 1 : 2;
        per[li]++;
        if (!strcmp(got, set[i].label)) right++, per_right[li]++;
        else fprintf(stderr, "  miss: want %-10s got %-10s %.60s\n", set[i].label, got, set[i].text);
    }
    double acc = (double)right / n;
    printf("classifier accuracy: %d/%d = %.1f%% (code %d/%d, structured %d/%d, chat %d/%d)\n", right, n, 100 * acc,
           per_right[0], per[0], per_right[1], per[1], per_right[2], per[2]);
    CHECK(n >= 60);
    CHECKF(acc >= 0.90, "accuracy %.3f below 0.90", acc);
    for (int k = 0; k < 3; k++) CHECKF(per[k] >= 15 && per_right[k] * 10 >= per[k] * 8, "class %s: %d/%d", labels[k],
                                         per_right[k], per[k]);

    /* edge cases: never crash, always one of the three */
    CHECK(!strcmp(pol_classify(NULL, 0), "chat"));
    CHECK(!strcmp(pol_classify("", 0), "chat"));
    CHECK(!strcmp(pol_classify("{", 1), "chat") || !strcmp(pol_classify("{", 1), "structured"));
    static char big[1 << 16];
    for (size_t i = 0; i < sizeof(big); i++) big[i] = "int x = 1;\n"[i % 11];
    CHECK(!strcmp(pol_classify(big, sizeof(big)), "code"));
    for (size_t i = 0; i < sizeof(big); i++) big[i] = (char)(i * 131 + 7);
    const char *g = pol_classify(big, sizeof(big));
    CHECK(!strcmp(g, "code") || !strcmp(g, "structured") || !strcmp(g, "chat"));

    /* cost: a figure, not an assertion */
    struct timespec t0, t1;
    int reps = 2000;
    volatile size_t sink = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < n; i++) sink += strlen(pol_classify(set[i].text, strlen(set[i].text)));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) * 1e-3) / ((double)reps * n);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < 2000; r++) sink += strlen(pol_classify(big, sizeof(big)));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us_big = ((t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) * 1e-3) / 2000.0;
    printf("classifier cost: %.2f us per call on the labelled set, %.2f us on a 64 KiB prompt (first %d bytes scanned)\n",
           us, us_big, POL_CLASSIFY_SCAN);
    (void)sink;
    TEST_DONE();
}
