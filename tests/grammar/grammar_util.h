/* grammar_util.h — shared pieces of the grammar tests and benchmark: loading a
 * real vocabulary, a seeded generator, and sample grammars in llama.cpp's
 * grammars/ style. */
#ifndef SPECD_TEST_GRAMMAR_UTIL_H
#define SPECD_TEST_GRAMMAR_UTIL_H
#include "engine/gguf/gguf.h"
#include "engine/grammar/grammar.h"
#include "engine/tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdio.h>

static uint64_t gu_rng = 0x243F6A8885A308D3ull;
static inline uint32_t gu_next(void) {
    gu_rng ^= gu_rng << 13, gu_rng ^= gu_rng >> 7, gu_rng ^= gu_rng << 17;
    return (uint32_t)(gu_rng >> 16);
}

/* A tokenizer from a GGUF file (NULL with a message when missing). */
static inline tokenizer *gu_tokenizer(const char *path) {
    char err[512];
    gguf_file *g = gguf_open(path, NULL, err, sizeof err);
    if (!g) {
        fprintf(stderr, "%s: %s\n", path, err);
        return NULL;
    }
    tokenizer *t = tok_create(g, err, sizeof err);
    if (!t) fprintf(stderr, "%s: %s\n", path, err);
    gguf_close(g);
    return t;
}

static const char *const GU_LIST =
    "root ::= item+\n"
    "# Excludes various line break characters\n"
    "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n";
static const char *const GU_ARITH =
    "root  ::= (expr \"=\" ws term \"\\n\")+\n"
    "expr  ::= term ([-+*/] term)*\n"
    "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
    "ident ::= [a-z] [a-z0-9_]* ws\n"
    "num   ::= [0-9]+ ws\n"
    "ws    ::= [ \\t\\n]*\n";
static const char *const GU_CLIKE =
    "root ::= (declaration)*\n"
    "declaration ::= dataType identifier \"(\" parameter? \")\" \"{\" statement* \"}\"\n"
    "dataType  ::= \"int\" ws | \"float\" ws | \"char\" ws\n"
    "identifier ::= [a-zA-Z_] [a-zA-Z_0-9]*\n"
    "parameter ::= dataType identifier\n"
    "statement ::=\n"
    "    ( dataType identifier ws \"=\" ws expression \";\" ) |\n"
    "    ( identifier ws \"=\" ws expression \";\" ) |\n"
    "    ( identifier ws \"(\" argList? \")\" \";\" ) |\n"
    "    ( \"return\" ws expression \";\" ) |\n"
    "    ( \"while\" \"(\" condition \")\" \"{\" statement* \"}\" ) |\n"
    "    ( \"for\" \"(\" forInit \";\" ws condition \";\" ws forUpdate \")\" \"{\" statement* \"}\" ) |\n"
    "    ( \"if\" \"(\" condition \")\" \"{\" statement* \"}\" (\"else\" \"{\" statement* \"}\")? ) |\n"
    "    ( singleLineComment ) |\n"
    "    ( multiLineComment )\n"
    "forInit ::= dataType identifier ws \"=\" ws expression | identifier ws \"=\" ws expression\n"
    "forUpdate ::= identifier ws \"=\" ws expression\n"
    "condition ::= expression relationOperator expression\n"
    "relationOperator ::= (\"<=\" | \"<\" | \"==\" | \"!=\" | \">=\" | \">\")\n"
    "expression ::= term ((\"+\" | \"-\") term)*\n"
    "term ::= factor((\"*\" | \"/\") factor)*\n"
    "factor ::= identifier | number | unaryTerm | funcCall | parenExpression\n"
    "unaryTerm ::= \"-\" factor\n"
    "funcCall ::= identifier \"(\" argList? \")\"\n"
    "parenExpression ::= \"(\" ws expression ws \")\"\n"
    "argList ::= expression (\",\" ws expression)*\n"
    "number ::= [0-9]+\n"
    "singleLineComment ::= \"//\" [^\\n]* \"\\n\"\n"
    "multiLineComment ::= \"/*\" ( [^*] | (\"*\" [^/]) )* \"*/\"\n"
    "ws ::= ([ \\t\\n]+)\n";
/* Deep stacks: nested brackets and bounded repetitions of rules that can
 * be empty, so tops are far from the bottom and leave their key's frames. */
static const char *const GU_NESTED =
    "root ::= item{1,3}\n"
    "item ::= \"[\" sp (item (\",\" sp item)*)? \"]\" sp | word sp\n"
    "word ::= [a-z]{1,5} (\"-\" [a-z]{0,3})?\n"
    "sp ::= \" \"?\n";
/* What a JSON Schema with properties name/age/tags turns into (hand-written
 * here so the engine test does not need the gateway). */
static const char *const GU_SCHEMA =
    "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws str \",\" ws \"\\\"age\\\"\" ws \":\" ws int "
    "( \",\" ws \"\\\"tags\\\"\" ws \":\" ws \"[\" ws ( str ( \",\" ws str ){0,3} )? \"]\" ws )? \"}\" ws\n"
    "str ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{0,24} \"\\\"\" ws\n"
    "int ::= \"-\"? ([0-9] | [1-9] [0-9]{0,8}) ws\n"
    "ws ::= | \" \"\n";
#endif
