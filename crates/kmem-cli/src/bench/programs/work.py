# Builds large dicts and lists and round-trips them through JSON.
import json
d = {("k%d" % i): [i, str(i) * (i % 7), {"n": i % 13}] for i in range(200000)}
s = json.dumps(d, sort_keys=True)
back = json.loads(s)
l = sorted((v[0] * 31) % 1000003 for v in back.values())
print(len(s), len(back), sum(l[::1000]))
