"""The Python binding against the demo model (run by tests/e2e/examples.sh):
HEARTH_LIB names libhearth.so, HEARTH_MODEL the model."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hearth  # noqa: E402

MODEL = os.environ.get("HEARTH_MODEL", "models/hearth-demo")


class TestHearth(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = hearth.Model(MODEL, n_threads=2)
        cls.s = hearth.Session(cls.m, max_batch=2, n_ctx=512)

    def test_text(self):
        ids = self.m.tokenize("What does abate mean?")
        self.assertEqual(self.m.detokenize(ids), "What does abate mean?")
        self.assertIn("<|im_start|>assistant", self.m.chat([{"role": "user", "content": "Hi"}]))

    def test_chat_greedy(self):
        root = os.path.dirname(os.path.dirname(os.path.abspath(MODEL)))
        with open(os.path.join(root, "tests/fixtures/demo/golden.json")) as f:
            golden = json.load(f)
        case = next(p for p in golden["prompts"] if p["name"] == "chat-abate")
        text, last = self.s.complete(messages=case["messages"], max_tokens=32, temperature=0)
        self.assertEqual(text, case["main"]["text"].split("<|im_end|>")[0])
        self.assertEqual(last.finish, "stop")
        self.assertGreater(last.usage["prompt_tokens"], 5)

    def test_seeded_stop_and_schema(self):
        a, _ = self.s.complete(prompt="In the beginning", max_tokens=12, temperature=0.8, seed=4)
        b, _ = self.s.complete(prompt="In the beginning", max_tokens=12, temperature=0.8, seed=4)
        self.assertEqual(a, b)
        text, last = self.s.complete(prompt="In the beginning", max_tokens=24, temperature=0,
                                     stop=["day"])
        self.assertNotIn("day", text)
        self.assertEqual(last.finish, "stop")
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        text, last = self.s.complete(prompt="{", max_tokens=40, temperature=0.5, seed=1,
                                     json_schema=schema)
        self.assertIsInstance(json.loads(text)["n"], int)

    def test_embed(self):
        # a causal LM with no sentence-transformers config: last token, unit length
        a, b = self.s.embed(["What does abate mean?", self.m.tokenize("Hi")])
        self.assertAlmostEqual(sum(x * x for x in a), 1.0, places=4)
        self.assertEqual(len(a), len(b))
        (c,) = self.s.embed(["What does abate mean?"], dimensions=8)
        self.assertEqual(len(c), 8)
        self.assertAlmostEqual(sum(x * x for x in c), 1.0, places=4)
        with self.assertRaises(hearth.HearthError):
            self.s.embed(["x"], prompt_name="nope")

    def test_errors(self):
        with self.assertRaises(hearth.HearthError) as e:
            hearth.Model("/nonexistent/model")
        self.assertIn("/nonexistent/model", str(e.exception))
        with self.assertRaises(hearth.HearthError) as e:
            self.s.complete(prompt="x", top_logprobs=99)
        self.assertIn("top_logprobs", str(e.exception))


if __name__ == "__main__":
    unittest.main()
