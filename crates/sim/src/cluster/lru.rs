//! One node's memory of groups: least recently used first out.

/// Groups are indexes `0..groups`; a doubly linked list over them gives
/// O(1) touch, insert and evict.
#[derive(Debug, Clone)]
pub(super) struct GroupLru {
    prev: Vec<u32>,
    next: Vec<u32>,
    present: Vec<bool>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
    len: u32,
    capacity: u32,
}

const NONE: u32 = u32::MAX;

impl GroupLru {
    pub(super) fn new(groups: u64, capacity: u32) -> Self {
        let n = groups as usize;
        GroupLru {
            prev: vec![NONE; n],
            next: vec![NONE; n],
            present: vec![false; n],
            head: NONE,
            tail: NONE,
            len: 0,
            capacity: capacity.max(1),
        }
    }

    pub(super) fn contains(&self, g: u32) -> bool {
        self.present[g as usize]
    }

    /// Marks `g` most recently used; it must be present.
    pub(super) fn touch(&mut self, g: u32) {
        self.unlink(g);
        self.push_front(g);
    }

    /// Adds `g` (absent) as most recently used, first evicting the least
    /// recently used group when full.
    pub(super) fn insert(&mut self, g: u32) {
        if self.len >= self.capacity {
            let victim = self.tail;
            self.unlink(victim);
            self.present[victim as usize] = false;
            self.len -= 1;
        }
        self.present[g as usize] = true;
        self.len += 1;
        self.push_front(g);
    }

    /// Forgets everything (the node failed).
    pub(super) fn clear(&mut self) {
        let mut g = self.head;
        while g != NONE {
            let next = self.next[g as usize];
            self.present[g as usize] = false;
            self.prev[g as usize] = NONE;
            self.next[g as usize] = NONE;
            g = next;
        }
        (self.head, self.tail, self.len) = (NONE, NONE, 0);
    }

    fn unlink(&mut self, g: u32) {
        let (p, n) = (self.prev[g as usize], self.next[g as usize]);
        if p == NONE {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NONE {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[g as usize] = NONE;
        self.next[g as usize] = NONE;
    }

    fn push_front(&mut self, g: u32) {
        self.next[g as usize] = self.head;
        self.prev[g as usize] = NONE;
        if self.head != NONE {
            self.prev[self.head as usize] = g;
        }
        self.head = g;
        if self.tail == NONE {
            self.tail = g;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_group() {
        let mut lru = GroupLru::new(10, 3);
        for g in [0, 1, 2] {
            lru.insert(g);
        }
        lru.touch(0);
        lru.insert(3);
        assert!(lru.contains(0) && !lru.contains(1) && lru.contains(2) && lru.contains(3));
        lru.insert(4);
        assert!(lru.contains(0) && !lru.contains(2));
        lru.clear();
        assert!((0..5).all(|g| !lru.contains(g)));
        lru.insert(1);
        assert!(lru.contains(1));
    }
}
