// A C++ program that allocates heavily: std::map, std::string, std::vector.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

int main() {
    std::map<std::string, std::vector<int>> m;
    for (int i = 0; i < 200000; i++) {
        std::string k = "key-" + std::to_string(i % 50000);
        m[k].push_back(i);
    }
    long sum = 0;
    for (auto &kv : m) sum += (long)kv.first.size() * (long)kv.second.size() + kv.second.back();
    std::printf("%zu %ld\n", m.size(), sum);
    return 0;
}
