//! The numbered table every object kind of the function lives in.

/// A numbered table of objects. Numbers start at `base` so that different object types rarely
/// share numbers (a driver that mixes up a CQN and an SQN then fails visibly).
#[derive(Debug)]
pub(crate) struct Table<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
    base: u32,
    max: u32,
    live: usize,
}

impl<T> Table<T> {
    pub fn new(base: u32, max: u32) -> Self {
        Self {
            items: Vec::new(),
            free: Vec::new(),
            base,
            max,
            live: 0,
        }
    }

    /// Inserts `item` and returns its number, or `None` when the table is full.
    pub fn insert(&mut self, item: T) -> Option<u32> {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                if self.items.len() as u32 >= self.max {
                    return None;
                }
                self.items.push(None);
                self.items.len() as u32 - 1
            }
        };
        self.items[index as usize] = Some(item);
        self.live += 1;
        Some(self.base + index)
    }

    fn index(&self, number: u32) -> Option<usize> {
        let index = number.checked_sub(self.base)? as usize;
        (index < self.items.len()).then_some(index)
    }

    pub fn get(&self, number: u32) -> Option<&T> {
        self.index(number).and_then(|i| self.items[i].as_ref())
    }

    pub fn get_mut(&mut self, number: u32) -> Option<&mut T> {
        let i = self.index(number)?;
        self.items[i].as_mut()
    }

    pub fn contains(&self, number: u32) -> bool {
        self.get(number).is_some()
    }

    pub fn remove(&mut self, number: u32) -> Option<T> {
        let i = self.index(number)?;
        let item = self.items[i].take()?;
        self.free.push(i as u32);
        self.live -= 1;
        Some(item)
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.items
            .iter()
            .enumerate()
            .filter_map(move |(i, t)| t.as_ref().map(|t| (self.base + i as u32, t)))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        let base = self.base;
        self.items
            .iter_mut()
            .enumerate()
            .filter_map(move |(i, t)| t.as_mut().map(|t| (base + i as u32, t)))
    }
}
