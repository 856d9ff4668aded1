/* test_chat.c — chat templates: exact renderings of a system+user+assistant+user
 * conversation for every family (expected strings written by hand from each
 * family's reference Jinja template, rendered with trim_blocks/lstrip_blocks as
 * Hugging Face does, minus the leading BOS), whitespace rules, truncation,
 * detection from GGUF metadata and config names. */
#include "engine/chat.h"
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const chat_msg conv[4] = {
    {"system", "You are a helpful assistant."},
    {"user", "Hello!"},
    {"assistant", "Hi there. How can I help?"},
    {"user", "Tell me a joke."},
};

static void check_render(chat_template_kind k, const chat_msg *m, int n, bool gen, const char *want) {
    char buf[2048];
    int len = chat_render(k, m, n, gen, NULL, buf, sizeof buf);
    CHECKF(len == (int)strlen(want) && strcmp(buf, want) == 0, "%s (gen=%d):\n got [%s]\nwant [%s]",
           chat_template_name(k), gen, buf, want);
    /* the length alone, with no buffer */
    CHECK(chat_render(k, m, n, gen, NULL, NULL, 0) == len);
}

/* Writes a tokenizer-less GGUF holding only a chat template and detects it. */
static chat_template_kind detect_str(const char *tmpl) {
    char path[] = "/tmp/specd_chat_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return (chat_template_kind)-2;
    close(fd);
    gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "general.architecture", "llama");
    if (tmpl) gguf_writer_set_str(w, "tokenizer.chat_template", tmpl);
    char err[256];
    chat_template_kind k = (chat_template_kind)-2;
    if (gguf_writer_write(w, path, err, sizeof err) == 0) {
        gguf_file *f = gguf_open(path, err, sizeof err);
        if (f) k = chat_template_detect(f, NULL);
        gguf_close(f);
    }
    gguf_writer_destroy(w);
    unlink(path);
    return k;
}

int main(void) {
    /* ---- the 4-message conversation, each family -------------------------- */
    check_render(CHAT_TEMPLATE_LLAMA2, conv, 4, true,
                 "[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! [/INST]"
                 " Hi there. How can I help? </s><s>[INST] Tell me a joke. [/INST]");
    check_render(CHAT_TEMPLATE_LLAMA3, conv, 4, true,
                 "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHi there. How can I help?<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_render(CHAT_TEMPLATE_CHATML, conv, 4, true,
                 "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                 "<|im_start|>user\nHello!<|im_end|>\n"
                 "<|im_start|>assistant\nHi there. How can I help?<|im_end|>\n"
                 "<|im_start|>user\nTell me a joke.<|im_end|>\n"
                 "<|im_start|>assistant\n");
    check_render(CHAT_TEMPLATE_MISTRAL, conv, 4, true,
                 "[INST] You are a helpful assistant.\n\nHello! [/INST]Hi there. How can I help?</s>"
                 "[INST] Tell me a joke. [/INST]");
    check_render(CHAT_TEMPLATE_ZEPHYR, conv, 4, true,
                 "<|system|>\nYou are a helpful assistant.</s>\n"
                 "<|user|>\nHello!</s>\n"
                 "<|assistant|>\nHi there. How can I help?</s>\n"
                 "<|user|>\nTell me a joke.</s>\n"
                 "<|assistant|>\n");
    check_render(CHAT_TEMPLATE_PLAIN, conv, 4, true,
                 "System: You are a helpful assistant.\nUser: Hello!\nAssistant: Hi there. How can I help?\n"
                 "User: Tell me a joke.\nAssistant:");

    /* ---- without the generation prompt ------------------------------------ */
    check_render(CHAT_TEMPLATE_LLAMA3, conv + 1, 1, false,
                 "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>");
    check_render(CHAT_TEMPLATE_CHATML, conv + 1, 1, false, "<|im_start|>user\nHello!<|im_end|>\n");
    check_render(CHAT_TEMPLATE_ZEPHYR, conv + 1, 1, false, "<|user|>\nHello!</s>\n");
    check_render(CHAT_TEMPLATE_PLAIN, conv + 1, 1, false, "User: Hello!\n");
    /* Llama 2 / Mistral have no assistant header: the same either way */
    check_render(CHAT_TEMPLATE_LLAMA2, conv + 1, 1, false, "[INST] Hello! [/INST]");
    check_render(CHAT_TEMPLATE_MISTRAL, conv + 1, 3, false,
                 "[INST] Hello! [/INST]Hi there. How can I help?</s>[INST] Tell me a joke. [/INST]");

    /* ---- whitespace: Llama 2 strip(), Llama 3 |trim, ChatML/Zephyr verbatim -- */
    const chat_msg ws[2] = {{"user", "  hi \n"}, {"assistant", "\tyo  "}};
    check_render(CHAT_TEMPLATE_LLAMA2, ws, 2, false, "[INST] hi [/INST] yo </s>");
    check_render(CHAT_TEMPLATE_LLAMA3, ws, 2, false,
                 "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nyo<|eot_id|>");
    check_render(CHAT_TEMPLATE_CHATML, ws, 1, false, "<|im_start|>user\n  hi \n<|im_end|>\n");
    /* Llama 2 strips the folded "<<SYS>>" text as a whole: the user text's
     * leading space stays, and an empty user text lets strip eat the "\n\n" */
    const chat_msg sys_ws[2] = {{"system", "S"}, {"user", " u "}};
    check_render(CHAT_TEMPLATE_LLAMA2, sys_ws, 2, true, "[INST] <<SYS>>\nS\n<</SYS>>\n\n u [/INST]");
    const chat_msg sys_empty[2] = {{"system", "S"}, {"user", ""}};
    check_render(CHAT_TEMPLATE_LLAMA2, sys_empty, 2, true, "[INST] <<SYS>>\nS\n<</SYS>> [/INST]");
    check_render(CHAT_TEMPLATE_LLAMA2, sys_empty, 1, true, "[INST] <<SYS>>\nS\n<</SYS>> [/INST]");
    /* a custom BOS text between Llama 2 turns */
    {
        char buf[256];
        chat_render(CHAT_TEMPLATE_LLAMA2, conv + 1, 3, true, "<BOS>", buf, sizeof buf);
        CHECKF(!strcmp(buf, "[INST] Hello! [/INST] Hi there. How can I help? </s><BOS>[INST] Tell me a joke. [/INST]"),
               "%s", buf);
    }
    /* empty conversation */
    check_render(CHAT_TEMPLATE_CHATML, conv, 0, true, "<|im_start|>assistant\n");
    check_render(CHAT_TEMPLATE_LLAMA2, conv, 0, true, "");

    /* ---- snprintf-like truncation ------------------------------------------- */
    {
        char small[10];
        memset(small, 'x', sizeof small);
        int need = chat_render(CHAT_TEMPLATE_CHATML, conv, 4, true, NULL, small, sizeof small);
        CHECK(need > (int)sizeof small);
        CHECK(small[9] == '\0' && !strcmp(small, "<|im_star"));
        char one[1] = {'x'};
        CHECK(chat_render(CHAT_TEMPLATE_CHATML, conv, 4, true, NULL, one, 1) == need && one[0] == '\0');
    }

    /* ---- names --------------------------------------------------------------- */
    const char *names[] = {"plain", "llama2", "llama3", "chatml", "mistral", "zephyr"};
    for (int k = 0; k < CHAT_TEMPLATE_COUNT; k++) {
        CHECK(chat_template_from_name(names[k]) == (chat_template_kind)k);
        CHECK(!strcmp(chat_template_name((chat_template_kind)k), names[k]));
    }
    CHECK(chat_template_from_name("ChatML") == CHAT_TEMPLATE_CHATML);
    CHECK(chat_template_from_name("tinyllama") == CHAT_TEMPLATE_ZEPHYR);
    CHECK((int)chat_template_from_name("jinja") == -1);
    CHECK((int)chat_template_from_name("") == -1);
    CHECK((int)chat_template_from_name(NULL) == -1);

    /* ---- detection from metadata (excerpts of the real templates) ------------ */
    CHECK(detect_str("{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + "
                     "messages[0]['content'] | trim + '\\n<</SYS>>\\n\\n' %}{% endif %}{{ bos_token + '[INST] ' "
                     "+ content.strip() + ' [/INST]' }}") == CHAT_TEMPLATE_LLAMA2);
    CHECK(detect_str("{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
                     "message['content'] | trim + '<|eot_id|>' %}") == CHAT_TEMPLATE_LLAMA3);
    CHECK(detect_str("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                     "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}") == CHAT_TEMPLATE_CHATML);
    CHECK(detect_str("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
                     "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}") ==
          CHAT_TEMPLATE_MISTRAL);
    CHECK(detect_str("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + "
                     "message['content'] + eos_token }}\n{% endif %}\n{% endfor %}") == CHAT_TEMPLATE_ZEPHYR);
    CHECK(detect_str("{{ messages | tojson }}") == CHAT_TEMPLATE_PLAIN);
    CHECK(detect_str("") == CHAT_TEMPLATE_PLAIN);
    CHECK(detect_str(NULL) == CHAT_TEMPLATE_PLAIN);
    CHECK(chat_template_detect(NULL, NULL) == CHAT_TEMPLATE_PLAIN);

    /* a real model without a template, with its tokenizer: plain */
    const char *dir = getenv("SPECD_MODELS");
    if (dir) {
        char path[1024], err[256];
        snprintf(path, sizeof path, "%s/stories260K.gguf", dir);
        gguf_file *f = gguf_open(path, err, sizeof err);
        if (f) {
            tokenizer *t = tok_create(f, err, sizeof err);
            CHECK(t != NULL);
            CHECK(chat_template_detect(f, t) == CHAT_TEMPLATE_PLAIN);
            tok_destroy(t);
            gguf_close(f);
        }
    }
    TEST_DONE();
}
