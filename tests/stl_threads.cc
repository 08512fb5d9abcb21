/*
 * stl_threads.cc - a C++ workload for the LD_PRELOAD tests (built without strata):
 * threads build std::map/std::unordered_map/std::vector/std::string, pass
 * std::shared_ptr objects to each other through a queue and check every result against
 * values computed in closed form. Prints "stl_threads: OK <checksum>" on success.
 */
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

void fail(const char *what, long got, long want)
{
    std::fprintf(stderr, "stl_threads: FAIL %s: got %ld, want %ld\n", what, got, want);
    std::exit(1);
}

struct alignas(64) Cell {
    long v[8];
};

struct Item {
    std::string text;
    std::vector<long> numbers;
    long sum;
};

class Queue {
  public:
    void push(std::shared_ptr<Item> p)
    {
        std::lock_guard<std::mutex> g(m_);
        q_.push(std::move(p));
        cv_.notify_one();
    }
    std::shared_ptr<Item> pop()
    {
        std::unique_lock<std::mutex> g(m_);
        cv_.wait(g, [&] { return !q_.empty(); });
        auto p = std::move(q_.front());
        q_.pop();
        return p;
    }

  private:
    std::mutex m_;
    std::condition_variable cv_;
    std::queue<std::shared_ptr<Item>> q_;
};

constexpr int kThreads = 6;
constexpr long kItems = 20000;

long containers(int id)
{
    long n = 20000 + id * 1000;
    std::map<long, std::string> m;
    std::unordered_map<std::string, long> u;
    std::vector<Cell> cells;
    for (long i = 0; i < n; i++) {
        m.emplace(i, std::to_string(i * 7));
        u[std::to_string(i)] = i;
        cells.push_back(Cell{{i}});
    }
    long sum = 0;
    for (auto &kv : m)
        sum += std::stol(kv.second);
    if (sum != 7 * n * (n - 1) / 2)
        fail("map sum", sum, 7 * n * (n - 1) / 2);
    long usum = 0;
    for (auto &kv : u)
        usum += kv.second;
    if (usum != n * (n - 1) / 2)
        fail("unordered_map sum", usum, n * (n - 1) / 2);
    if (reinterpret_cast<uintptr_t>(cells.data()) % 64)
        fail("alignas(64) vector", 1, 0);
    std::string s;
    for (long i = 0; i < n; i++)
        s += char('a' + i % 26);
    if ((long)s.size() != n)
        fail("string size", (long)s.size(), n);
    for (long i = n - 1; i > n / 2; i--)
        m.erase(i);
    return sum + usum + (long)m.size();
}

} // namespace

int main()
{
    Queue q;
    std::vector<long> results(kThreads);
    std::vector<std::thread> threads;
    // Producers: make items, hand them over; consumers (other threads) check and drop them.
    for (int t = 0; t < kThreads; t++) {
        threads.emplace_back([&, t] {
            results[t] = containers(t);
            if (t % 2 == 0) {
                for (long i = 0; i < kItems; i++) {
                    auto it = std::make_shared<Item>();
                    it->text = std::string(size_t(i % 300 + 1), char('A' + t));
                    it->numbers.assign(size_t(i % 50 + 1), i);
                    it->sum = i * (i % 50 + 1);
                    q.push(std::move(it));
                }
            } else {
                long total = 0;
                for (long i = 0; i < kItems; i++) {
                    auto it = q.pop();
                    long s = 0;
                    for (long x : it->numbers)
                        s += x;
                    if (s != it->sum || it->text.empty())
                        fail("item sum", s, it->sum);
                    total += (long)it->text.size();
                }
                results[t] += total;
            }
        });
    }
    for (auto &th : threads)
        th.join();
    long checksum = 0;
    for (long r : results)
        checksum += r;
    std::printf("stl_threads: OK %ld\n", checksum);
    return 0;
}
